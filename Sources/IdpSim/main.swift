print("idp-sim")
