import Foundation

/// A PC/SC badge reader of the tests' own: a private pcscd (in the foreground) whose one reader is
/// vsmartcard's vpcd, and badges that a test puts on it (``tap(uid:status:stall:slot:)``, a small card
/// process that connects to vpcd over TCP) and takes off (``VirtualBadge/remove()``).
///
/// The system's pcscd is neither used nor disturbed: pcscd 1.9 keeps its socket and pid file in
/// /run/pcscd whatever PCSCLITE_CSOCK_NAME says, so it runs in a mount namespace of its own
/// (`unshare --mount`, as root) where a directory of the test run is bound over /run; the client
/// side reaches the socket there through PCSCLITE_CSOCK_NAME. Its readers come from a private
/// reader.conf.d (`--config`), not /etc. libpcsclite reads PCSCLITE_CSOCK_NAME once per process,
/// and setting it in a running test process would race with other threads reading the environment,
/// so the tests that use a reader run in a process of their own started with it
/// (``environment(for:)``), one test at a time.
package final class VirtualBadgeReader: @unchecked Sendable {
    /// The name pcscd gives vpcd's first slot (the one ``tap(uid:status:stall:slot:)`` connects to).
    package static let readerName = "Virtual PCD 00 00"
    package static let secondReaderName = "Virtual PCD 00 01"

    /// The environment of a process whose libpcsclite reaches the readers started in `runDirectory`.
    package static func environment(for runDirectory: String) -> [String: String] {
        ["PCSCLITE_CSOCK_NAME": runDirectory + "/pcscd/pcscd.comm"]
    }

    /// The private /run bound for pcscd: where this process's PCSCLITE_CSOCK_NAME points.
    private let runDirectory: String

    private let files: TemporaryDirectory
    private let lock = NSLock()
    private var daemon: ChildProcess?
    /// vpcd's port (its second slot listens on the next one), chosen free at each start of pcscd.
    private var currentPort: UInt16 = 0
    package var port: UInt16 { lock.withLock { currentPort } }

    /// Starts pcscd with vpcd as its reader (unless not `started`: then ``startDaemon(timeout:)``
    /// does); returns once pcscd says it is ready, at most `timeout`.
    package init(started: Bool = true, timeout: Duration = .seconds(20)) throws {
        guard let socket = ProcessInfo.processInfo.environment["PCSCLITE_CSOCK_NAME"],
            socket.hasSuffix("/pcscd/pcscd.comm")
        else {
            throw ProcessFailure("start this process with VirtualBadgeReader.environment(for:): PCSCLITE_CSOCK_NAME")
        }
        runDirectory = String(socket.dropLast("/pcscd/pcscd.comm".count))
        for (tool, hint) in [("/usr/sbin/pcscd", "pcscd"), (Self.driver, "vsmartcard-vpcd")]
        where !FileManager.default.fileExists(atPath: tool) {
            throw ProcessFailure("\(tool) is missing (Debian: apt install \(hint); `make deps` does)")
        }
        files = try TemporaryDirectory()
        try FileManager.default.createDirectory(
            atPath: files.path + "/reader.conf.d", withIntermediateDirectories: true)
        _ = try files.write("badge.py", Self.cardScript)
        if started { try startDaemon(timeout: timeout) }
    }

    deinit { stopDaemon() }

    private static let driver = "/usr/lib/pcsc/drivers/serial/libifdvpcd.so"

    /// (Re)starts pcscd, on a fresh pair of free ports (the last one may still be in TIME_WAIT).
    package func startDaemon(timeout: Duration = .seconds(20)) throws {
        stopDaemon()
        var lastFailure = ""
        for _ in 0..<5 {
            // vpcd binds the wildcard address.
            guard let port = FreePorts.pair(everyAddress: true) else { continue }
            // vpcd's DEVICENAME: /dev/null (wait for a card to connect) and the port it listens on.
            _ = try files.write(
                "reader.conf.d/vpcd",
                """
                FRIENDLYNAME "Virtual PCD"
                DEVICENAME /dev/null:\(port)
                LIBPATH \(Self.driver)
                CHANNELID \(port)

                """)
            try? FileManager.default.removeItem(atPath: runDirectory + "/pcscd")
            let process = try ChildProcess(
                "pcscd", executable: "/usr/bin/unshare",
                arguments: [
                    "--mount", "--propagation", "private", "/bin/sh", "-c",
                    "mount --bind \"$0\" /run && exec /usr/sbin/pcscd --foreground --info --config \"$1\"",
                    runDirectory, files.path + "/reader.conf.d",
                ])
            do {
                try process.waitForLine(timeout: timeout) { $0.contains("daemon ready") }
                lock.withLock {
                    daemon = process
                    currentPort = port
                }
                return
            } catch {
                lastFailure = "\(error)"
                process.kill()
            }
        }
        throw ProcessFailure("pcscd did not start: \(lastFailure)")
    }

    /// Stops pcscd (SIGTERM, then SIGKILL after 5 seconds); its reader goes with it.
    package func stopDaemon() {
        let process = lock.withLock { () -> ChildProcess? in
            defer { daemon = nil }
            return daemon
        }
        guard let process else { return }
        process.signal(SIGTERM)
        if (try? process.waitForExit(timeout: .seconds(5))) == nil { process.kill() }
    }

    /// pcscd's output so far, for a failing test's message.
    package var daemonOutput: String { lock.withLock { daemon?.allOutput ?? "" } }

    /// Puts a badge on the reader: it answers Get Data (FF CA 00 00 00) with `uid` and 90 00, or
    /// with `status` alone when that is not "9000"; with `stall`, never. Returns once vpcd accepted it.
    /// `slot` 1 is vpcd's second reader, "Virtual PCD 00 01" (vpcd sees no further card on a slot
    /// whose card went away in the middle of an APDU).
    package func tap(uid: [UInt8], status: String = "9000", stall: Bool = false, slot: UInt16 = 0) throws
        -> VirtualBadge
    {
        let hex = uid.map { String(format: "%02X", $0) }.joined()
        let process = try ChildProcess(
            "badge", executable: "/usr/bin/python3",
            arguments: [files.path + "/badge.py", "--port", "\(port + slot)", "--uid", hex, "--status", status]
                + (stall ? ["--stall"] : []))
        try process.waitForLine(timeout: .seconds(10)) { $0 == "connected" }
        return VirtualBadge(process)
    }

    /// The badge: a card for vpcd in Python's standard library only. (python3-virtualsmartcard's
    /// own `vicc` is not used: Debian 12 installs it outside Python's path and without the crypto
    /// module it imports, and its cards answer no Get Data for a UID anyway.)
    private static let cardScript = #"""
        # vpcd's protocol: each message is a 2-byte big-endian length, then its bytes; a 1-byte
        # message is a control (0 power off, 1 power on, 2 reset, 4 send the ATR).
        import argparse, socket, struct, sys, time

        # The ATR PC/SC part 3 gives a MIFARE Classic 1K seen through a contactless reader.
        ATR = bytes.fromhex("3B8F8001804F0CA000000306030001000000006A")

        parser = argparse.ArgumentParser()
        parser.add_argument("--port", type=int, required=True)
        parser.add_argument("--uid", default="")
        parser.add_argument("--status", default="9000")
        parser.add_argument("--stall", action="store_true")
        args = parser.parse_args()
        uid = bytes.fromhex(args.uid)
        status = bytes.fromhex(args.status)

        sock = socket.create_connection(("127.0.0.1", args.port))
        print("connected", flush=True)

        def receive(count):
            data = b""
            while len(data) < count:
                chunk = sock.recv(count - len(data))
                if not chunk:
                    sys.exit(0)
                data += chunk
            return data

        def send(message):
            sock.sendall(struct.pack("!H", len(message)) + message)

        while True:
            (size,) = struct.unpack("!H", receive(2))
            message = receive(size) if size else b""
            if size == 1:
                if message == b"\x04":
                    send(ATR)
                continue
            if message[:4] == b"\xff\xca\x00\x00":
                if args.stall:
                    print("stalling", flush=True)
                    while True:
                        time.sleep(3600)
                send((uid if status == b"\x90\x00" else b"") + status)
            else:
                send(b"\x6d\x00")
        """#
}

/// A badge on a ``VirtualBadgeReader``; taken off when removed or released.
package final class VirtualBadge: @unchecked Sendable {
    package let process: ChildProcess

    init(_ process: ChildProcess) {
        self.process = process
    }

    deinit { process.kill() }

    /// Takes the badge off the reader (its connection to vpcd closes).
    package func remove() { process.kill() }

    /// Waits until a stalling badge has been asked for its UID (and does not answer).
    package func waitUntilAsked(timeout: Duration = .seconds(10)) throws {
        try process.waitForLine(timeout: timeout) { $0 == "stalling" }
    }
}
