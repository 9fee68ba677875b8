/// The contract's plain values (error codes, device modes, change reasons) are part of the core's API.
@_exported import BrokerAPI
