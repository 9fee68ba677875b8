import DBus

extension BusDriver {
    /// The driver of `connection`'s bus.
    init(_ connection: DBusConnection) {
        self.init(connection, destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus")
    }

    /// Whether `name` has an owner on `connection`'s bus now; false when the driver does not say.
    static func hasOwner(_ name: String, on connection: DBusConnection) async -> Bool {
        (try? await BusDriver(connection).nameHasOwner(name, timeout: .seconds(5)).value) ?? false
    }
}
