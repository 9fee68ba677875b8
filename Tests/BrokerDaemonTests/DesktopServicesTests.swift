import DBus
import Testing

@testable import BrokerDaemon

/// The readers generated from dbus/desktop/*.xml take a desktop service's signal or reply only in
/// the shape its interface declares. The old hand reads (`arguments.first?.uint32` and the like)
/// looked through variants and ignored what followed the first argument, so some of these shapes
/// passed them: each such case checks that the old read took it, then that the reader refuses it.
@Suite("Desktop services: generated readers refuse another shape")
struct DesktopServicesTests {
    static func signal(_ interface: String, _ member: String, _ arguments: [DBusValue]) -> DBusSignal {
        DBusSignal(sender: ":1.7", path: "/", interface: interface, member: member, arguments: arguments)
    }

    @Test("a screensaver's ActiveChanged(true) is read, each interface's own")
    func activeChangedRead() throws {
        let gnome = Self.signal("org.gnome.ScreenSaver", "ActiveChanged", [.bool(true)])
        #expect(try GnomeScreenSaver.ActiveChanged(gnome).newValue == true)
        let kde = Self.signal("org.freedesktop.ScreenSaver", "ActiveChanged", [.bool(false)])
        #expect(try FreedesktopScreenSaver.ActiveChanged(kde).value == false)
        // Each reader is its interface's: GNOME's signal is not KDE's.
        #expect(throws: DesktopServiceMismatch.self) { try FreedesktopScreenSaver.ActiveChanged(gnome) }
        #expect(ScreenLockWatch.screenSavers.map { $0.activated(gnome) } == [true, false, false, false])
    }

    @Test("ActiveChanged with a variant, or another member, does not lock")
    func activeChangedRefused() {
        let wrapped = Self.signal("org.gnome.ScreenSaver", "ActiveChanged", [.variant(.bool(true))])
        #expect(wrapped.arguments.first?.bool == true, "the old read took it: the screen counted as locked")
        #expect(throws: DesktopServiceMismatch.self) { try GnomeScreenSaver.ActiveChanged(wrapped) }
        #expect(ScreenLockWatch.screenSavers.allSatisfy { !$0.activated(wrapped) })
        let extra = Self.signal("org.gnome.ScreenSaver", "ActiveChanged", [.bool(true), .string("x")])
        #expect(throws: DesktopServiceMismatch.self) { try GnomeScreenSaver.ActiveChanged(extra) }
        // The old code left the member to the match rule; the reader checks it itself.
        let other = Self.signal("org.gnome.ScreenSaver", "WakeUpScreen", [.bool(true)])
        #expect(throws: DesktopServiceMismatch.self) { try GnomeScreenSaver.ActiveChanged(other) }
        let string = Self.signal("org.gnome.ScreenSaver", "ActiveChanged", [.string("true")])
        #expect(throws: DesktopServiceMismatch.self) { try GnomeScreenSaver.ActiveChanged(string) }
    }

    @Test("WatchFired of another type names no watch")
    func watchFiredRefused() throws {
        let fired = Self.signal("org.gnome.Mutter.IdleMonitor", "WatchFired", [.uint32(7)])
        #expect(try MutterIdleMonitor.WatchFired(fired).id == 7)
        let wrapped = Self.signal("org.gnome.Mutter.IdleMonitor", "WatchFired", [.variant(.uint32(7))])
        #expect(wrapped.arguments.first?.uint32 == 7, "the old read took it as watch 7")
        #expect(throws: DesktopServiceMismatch.self) { try MutterIdleMonitor.WatchFired(wrapped) }
        let wide = Self.signal("org.gnome.Mutter.IdleMonitor", "WatchFired", [.uint64(7)])
        #expect(throws: DesktopServiceMismatch.self) { try MutterIdleMonitor.WatchFired(wide) }
        let otherInterface = Self.signal("org.gnome.ScreenSaver", "WatchFired", [.uint32(7)])
        #expect(throws: DesktopServiceMismatch.self) { try MutterIdleMonitor.WatchFired(otherInterface) }
    }

    @Test("ActionInvoked and NotificationClosed are read only as the specification declares them")
    func notificationSignals() throws {
        let chosen = Self.signal(
            "org.freedesktop.Notifications", "ActionInvoked", [.uint32(3), .string("stay-signed-in")])
        let action = try Notifications.ActionInvoked(chosen)
        #expect(action.id == 3 && action.actionKey == "stay-signed-in")
        let wrapped = Self.signal(
            "org.freedesktop.Notifications", "ActionInvoked", [.uint32(3), .variant(.string("stay-signed-in"))])
        #expect(wrapped.arguments.dropFirst().first?.string == "stay-signed-in", "the old read took it")
        #expect(throws: DesktopServiceMismatch.self) { try Notifications.ActionInvoked(wrapped) }
        // Same arguments, another member: a closed notice is not a chosen action.
        let closedAsAction = Self.signal(
            "org.freedesktop.Notifications", "NotificationClosed", [.uint32(3), .string("stay-signed-in")])
        #expect(throws: DesktopServiceMismatch.self) { try Notifications.ActionInvoked(closedAsAction) }
        let closed = Self.signal("org.freedesktop.Notifications", "NotificationClosed", [.uint32(3), .uint32(2)])
        let notice = try Notifications.NotificationClosed(closed)
        #expect(notice.id == 3 && notice.reason == 2)
        let short = Self.signal("org.freedesktop.Notifications", "NotificationClosed", [.uint32(3)])
        #expect(short.arguments.first?.uint32 == 3, "the old read took it")
        #expect(throws: DesktopServiceMismatch.self) { try Notifications.NotificationClosed(short) }
    }

    @Test("the portal's Response and logind's Lock are read as declared")
    func portalAndLogind() throws {
        let response = Self.signal("org.freedesktop.portal.Request", "Response", [.uint32(0), .vardict([:])])
        #expect(try PortalRequest.Response(response).response == 0)
        let bare = Self.signal("org.freedesktop.portal.Request", "Response", [.uint32(0)])
        #expect(bare.arguments.first?.uint32 == 0, "the old read took it as opened")
        #expect(throws: DesktopServiceMismatch.self) { try PortalRequest.Response(bare) }
        let lock = Self.signal("org.freedesktop.login1.Session", "Lock", [])
        #expect(throws: Never.self) { try LogindSessionObject.Lock(lock) }
        let unlock = Self.signal("org.freedesktop.login1.Session", "Unlock", [])
        #expect(throws: DesktopServiceMismatch.self) { try LogindSessionObject.Lock(unlock) }
    }

    @Test("a reply of another shape is an error, not a value")
    func replies() throws {
        #expect(try Notifications.NotifyReply([.uint32(9)]).id == 9)
        #expect([DBusValue.variant(.uint32(9))].first?.uint32 == 9, "the old read took it as notice 9")
        #expect(throws: DesktopServiceMismatch.self) { try Notifications.NotifyReply([.variant(.uint32(9))]) }
        #expect(throws: DesktopServiceMismatch.self) { try Notifications.NotifyReply([.uint32(9), .uint32(1)]) }
        #expect(throws: DesktopServiceMismatch.self) { try Notifications.NotifyReply([]) }
        #expect(try LogindManager.GetSessionReply([.objectPath("/s/1")]).objectPath == "/s/1")
        #expect(throws: DesktopServiceMismatch.self) { try LogindManager.GetSessionReply([.string("/s/1")]) }
        #expect(try PortalOpenURI.OpenURIReply([.objectPath("/r/1")]).handle == "/r/1")
        #expect(throws: DesktopServiceMismatch.self) {
            try FreedesktopScreenSaver.GetSessionIdleTimeReply([.uint64(5)])
        }
        #expect(throws: DesktopServiceMismatch.self) { try BusDriver.NameHasOwnerReply([.variant(.bool(true))]) }
        let error = #expect(throws: DesktopServiceMismatch.self) {
            try MutterIdleMonitor.AddIdleWatchReply([.string("1")])
        }
        #expect(error?.description == "org.gnome.Mutter.IdleMonitor.AddIdleWatch answered (s), not (u)")
    }
}
