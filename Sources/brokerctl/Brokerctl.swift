print("brokerctl")
