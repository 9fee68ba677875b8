/// The rule for text from outside (`OutsideText`) is applied on both sides of the bus, so it comes
/// with the contract's values: brokerd, the client library and brokerctl import it from here.
@_exported import TextRules
