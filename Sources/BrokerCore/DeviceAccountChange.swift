/// One change of the device's account, announced with the `AccountChanged` signal. (Apps see it
/// through the client library's `AccountChange`, which also says when the broker restarted.)
public struct DeviceAccountChange: Sendable, Equatable {
    public var current: Account?
    public var previous: Account?
    public var reason: AccountChangeReason

    public init(current: Account?, previous: Account?, reason: AccountChangeReason) {
        self.current = current
        self.previous = previous
        self.reason = reason
    }
}
