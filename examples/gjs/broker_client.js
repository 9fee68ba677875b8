#!/usr/bin/gjs -m
// A client of the shared-device broker in GJS, with none of this project's code: what a GNOME
// app would write, with Gio.DBusProxy. Debian's gjs package is all it needs:
//
//     sudo apt-get install gjs
//
// Reads the device mode (a property, from the proxy's cache) and this app's current and previous
// account (a method), then prints each AccountChanged signal.
//
// Usage:
//     gjs -m broker_client.js [--address BUS] [--client-id ID] [--count N] [--timeout SECONDS]
//
// Prints the same lines as examples/python/broker_client.py:
//     device mode: shared
//     current account: alice@contoso.example | none
//     previous account: ... | none
//     waiting for AccountChanged
//     AccountChanged: signed-out current=none previous=alice@contoso.example
// Exits 0 after N signals (default 1; 0 means wait forever), 1 when --timeout passes first.

import Gio from 'gi://Gio';
import GLib from 'gi://GLib';
import System from 'system';

const BUS_NAME = 'io.shareddevice.Broker1';
const OBJECT_PATH = '/io/shareddevice/Broker1';
const INTERFACE = 'io.shareddevice.Broker1';

const options = {address: null, clientId: 'gjs-app', count: 1, timeout: 0};
const args = System.programArgs;
for (let i = 0; i < args.length; i += 2) {
    const value = args[i + 1];
    switch (args[i]) {
    case '--address': options.address = value; break;
    case '--client-id': options.clientId = value; break;
    case '--count': options.count = Number(value); break;
    case '--timeout': options.timeout = Number(value); break;
    default:
        printerr(`usage: broker_client.js [--address BUS] [--client-id ID] [--count N] [--timeout SECONDS]`);
        System.exit(2);
    }
}

// The username of an account dictionary (a{sv}, unpacked); an empty one means nobody.
const username = account => account.username?.unpack() || 'none';

const connection = options.address
    ? Gio.DBusConnection.new_for_address_sync(options.address,
        Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION,
        null, null)
    : Gio.bus_get_sync(Gio.BusType.SESSION, null);

// No introspection data is needed: the proxy follows the well-known name (a restarted broker is
// heard too), caches the properties and hands on the signals.
const broker = Gio.DBusProxy.new_sync(connection, Gio.DBusProxyFlags.NONE, null,
    BUS_NAME, OBJECT_PATH, INTERFACE, null);

let current, previous;
try {
    const reply = broker.call_sync('GetCurrentAccount', new GLib.Variant('(s)', [options.clientId]),
        Gio.DBusCallFlags.NONE, -1, null);
    [current, previous] = reply.deepUnpack();
} catch (error) {
    // A broker error keeps its D-Bus name (io.shareddevice.Broker1.Error.*): the app's to act on.
    const name = Gio.DBusError.get_remote_error(error) ?? 'error';
    Gio.DBusError.strip_remote_error(error);
    print(`error: ${name}: ${error.message}`);
    System.exit(1);
}
print(`device mode: ${broker.get_cached_property('DeviceMode')?.unpack() ?? 'unknown'}`);
print(`current account: ${username(current)}`);
print(`previous account: ${username(previous)}`);

const loop = new GLib.MainLoop(null, false);
let seen = 0;
let status = 0;
broker.connect('g-signal', (_proxy, _sender, signal, parameters) => {
    if (signal !== 'AccountChanged')
        return;
    const [now, before, reason] = parameters.deepUnpack();
    print(`AccountChanged: ${reason} current=${username(now)} previous=${username(before)}`);
    seen += 1;
    if (options.count && seen >= options.count)
        loop.quit();
});
// A round trip to the bus after the proxy's AddMatch: once it returns, the match is in place.
connection.call_sync('org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus', 'GetId',
    null, null, Gio.DBusCallFlags.NONE, -1, null);
print('waiting for AccountChanged');
if (options.timeout > 0) {
    GLib.timeout_add(GLib.PRIORITY_DEFAULT, options.timeout * 1000, () => {
        print(`timed out after ${options.timeout} s`);
        status = 1;
        loop.quit();
        return GLib.SOURCE_REMOVE;
    });
}
loop.run();
System.exit(status);
