print("brokerd")
