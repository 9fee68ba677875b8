import Testing

@testable import DBus

/// `PropertiesChanged` is read in one place, in the shape the specification gives it.
@Suite("PropertiesChanged reader")
struct PropertiesChangeTests {
    static func signal(_ arguments: [DBusValue], member: String = "PropertiesChanged") -> DBusSignal {
        DBusSignal(
            sender: ":1.3", path: "/org/freedesktop/login1/session/_31",
            interface: "org.freedesktop.DBus.Properties", member: member, arguments: arguments)
    }

    @Test("a change is read: its interface, the values that changed and those invalidated")
    func read() throws {
        let signal = Self.signal([
            .string("org.freedesktop.login1.Session"), .vardict(["IdleHint": .bool(true)]), .strings(["IdleSinceHint"]),
        ])
        let change = try #require(DBusPropertiesChange(signal))
        #expect(change.interface == "org.freedesktop.login1.Session")
        #expect(change.changed == ["IdleHint": .bool(true)])
        #expect(change.invalidated == ["IdleSinceHint"])
        #expect(change.mentions("IdleHint") && change.mentions("IdleSinceHint") && !change.mentions("Active"))
    }

    @Test("another member or shape is refused")
    func refused() {
        let interface = DBusValue.string("org.freedesktop.login1.Session")
        let changed = DBusValue.vardict(["IdleHint": .bool(true)])
        #expect(DBusPropertiesChange(Self.signal([interface, changed, .strings([])], member: "Changed")) == nil)
        #expect(DBusPropertiesChange(Self.signal([interface, changed])) == nil)
        #expect(DBusPropertiesChange(Self.signal([interface, .stringDict(["IdleHint": "yes"]), .strings([])])) == nil)
        #expect(DBusPropertiesChange(Self.signal([interface, changed, .variant(.strings([]))])) == nil)
        #expect(DBusPropertiesChange(Self.signal([.variant(interface), changed, .strings([])])) == nil)
        var elsewhere = Self.signal([interface, changed, .strings([])])
        elsewhere.interface = "org.freedesktop.login1.Session"
        #expect(DBusPropertiesChange(elsewhere) == nil)
    }

    @Test("its rule names the sender and the interface as arg0")
    func rule() {
        let rule = DBusPropertiesChange.rule(sender: "org.freedesktop.login1", path: "/s", interface: "a.B")
        #expect(
            rule.ruleString
                == "type='signal',sender='org.freedesktop.login1',path='/s',"
                + "interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',arg0='a.B'")
    }
}
