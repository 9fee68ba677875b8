import Foundation
import Glibc
import Identity
import Testing

@testable import BrokerDaemon

/// brokerd's configuration file: a key it does not know is an error naming it, and a client
/// secret is read only from a file no one but its owner can read.
@Suite("Configuration file: unknown keys and client secrets")
struct DaemonConfigurationTests {
    final class Files: @unchecked Sendable {
        let path = NSTemporaryDirectory() + "config-\(UUID().uuidString)"
        init() throws { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit { try? FileManager.default.removeItem(atPath: path) }

        func write(_ name: String, _ text: String, mode: mode_t) throws -> String {
            let file = path + "/" + name
            try text.write(toFile: file, atomically: true, encoding: .utf8)
            chmod(file, mode)
            return file
        }
    }

    static func loadError(_ path: String) -> String? {
        do {
            _ = try DaemonConfigurationFile.load(path: path)
            return nil
        } catch {
            return error.description
        }
    }

    @Test func everyKeyIsInTheManualPage() throws {
        let page = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../man/broker.conf.5.scd").standardized.path
        let text = try String(contentsOfFile: page, encoding: .utf8)
        for key in DaemonConfigurationFile.knownKeys + DaemonConfigurationFile.Client.knownKeys {
            #expect(text.contains("*\(key)*"), "broker.conf(5) does not document \(key)")
        }
    }

    @Test("phoneApprovalLoginHint: the username put in as JSON string content; absent, as typed")
    func phoneApprovalLoginHintIsATemplate() throws {
        let files = try Files()
        let file = try files.write(
            "hint.json", #"{"phoneApprovalLoginHint": "{\"username\":\"{username}\"}"}"#, mode: 0o644)
        let hint = try #require(try DaemonConfigurationFile.load(path: file).phoneApprovalLoginHint)
        #expect(hint.template == #"{"username":"{username}"}"#)
        #expect(hint.hint(for: "alice") == #"{"username":"alice"}"#)
        // A username that would end the string and add a key of its own stays one string's content.
        let hostile = #"eve","sub":"alice"}\"#
        let sent = hint.hint(for: hostile)
        #expect(sent == #"{"username":"eve\",\"sub\":\"alice\"}\\"}"#)
        let parsed = try JSONSerialization.jsonObject(with: Data(sent.utf8)) as? [String: String]
        #expect(parsed == ["username": hostile])
        #expect(hint.hint(for: #"o"}"#) == #"{"username":"o\"}"}"#)
        // Every {username} is replaced.
        let twice = try DaemonConfigurationFile.load(
            path: try files.write("twice.json", #"{"phoneApprovalLoginHint": "{username}@{username}"}"#, mode: 0o644))
        #expect(twice.phoneApprovalLoginHint?.hint(for: "a") == "a@a")
        // Absent: the default, which sends the username exactly as typed (a DOMAIN\name stays one).
        let none = try files.write("none.json", "{}", mode: 0o644)
        #expect(try DaemonConfigurationFile.load(path: none).phoneApprovalLoginHint == nil)
        #expect(PhoneApprovalLoginHint.plain.hint(for: #"CORP\alice"#) == #"CORP\alice"#)
        // The administrator's template wins over the user's.
        let user = DaemonConfigurationFile(phoneApprovalLoginHint: .plain)
        let admin = DaemonConfigurationFile(phoneApprovalLoginHint: hint)
        #expect(user.overridden(by: admin).phoneApprovalLoginHint == hint)
        #expect(admin.overridden(by: DaemonConfigurationFile()).phoneApprovalLoginHint == hint)
    }

    @Test("loopbackRedirectPorts: one port as a number or a string, or a range; absent, any port")
    func loopbackRedirectPortsAreReadAsWritten() throws {
        let files = try Files()
        for (text, range) in [
            ("53100", UInt16(53100)...53100), (#""53100""#, 53100...53100), (#""53100-53109""#, 53100...53109),
            ("65535", 65535...65535), (#""1024-1123""#, 1024...1123),
        ] as [(String, ClosedRange<UInt16>)] {
            let file = try files.write("ports.json", #"{"loopbackRedirectPorts": \#(text)}"#, mode: 0o644)
            #expect(try DaemonConfigurationFile.load(path: file).loopbackRedirectPorts?.range == range, "\(text)")
        }
        let none = try files.write("none.json", "{}", mode: 0o644)
        #expect(try DaemonConfigurationFile.load(path: none).loopbackRedirectPorts == nil)
        // The administrator's ports win over the user's.
        let user = DaemonConfigurationFile(loopbackRedirectPorts: .init(50000...50001))
        let admin = DaemonConfigurationFile(loopbackRedirectPorts: .init(53100...53100))
        #expect(user.overridden(by: admin).loopbackRedirectPorts?.range == 53100...53100)
        #expect(user.overridden(by: DaemonConfigurationFile()).loopbackRedirectPorts?.range == 50000...50001)
    }

    @Test func compatibilityNamesTheProtocolsToServe() throws {
        let files = try Files()
        let asked = try files.write("asked.json", #"{"compatibility": ["microsoft-broker1"]}"#, mode: 0o644)
        #expect(try DaemonConfigurationFile.load(path: asked).compatibility == [.microsoftBroker1])
        let unknown = try files.write("unknown.json", #"{"compatibility": ["microsoft-broker2"]}"#, mode: 0o644)
        let error = try #require(Self.loadError(unknown))
        #expect(error.contains("microsoft-broker2"), "\(error)")
        // The administrator's choice wins, an empty list included.
        let user = DaemonConfigurationFile(compatibility: [.microsoftBroker1])
        #expect(user.overridden(by: DaemonConfigurationFile(compatibility: [])).compatibility == [])
        #expect(user.overridden(by: DaemonConfigurationFile()).compatibility == [.microsoftBroker1])
    }

    @Test func anUnknownKeyIsNamedWithWhereItStands() throws {
        let files = try Files()
        let top = try files.write("top.json", #"{"deviceMode": "shared", "tokenStorag": "memory"}"#, mode: 0o644)
        let topError = try #require(Self.loadError(top))
        #expect(topError.contains(#"unknown key "tokenStorag" at the top level"#), "\(topError)")
        #expect(topError.contains("tokenStorage"), "the known keys are listed: \(topError)")

        let client = try files.write(
            "client.json", #"{"clients": [{"clientId": "a"}, {"clientId": "b", "allowedExecutable": ["/x"]}]}"#,
            mode: 0o644)
        let clientError = try #require(Self.loadError(client))
        #expect(clientError.contains(#"unknown key "allowedExecutable" in clients[1]"#), "\(clientError)")

        let fine = try files.write(
            "fine.json", #"{"deviceMode": "default", "clients": [{"clientId": "a"}]}"#, mode: 0o644)
        #expect(Self.loadError(fine) == nil)
    }

    @Test func anInlineSecretNeedsAFileOnlyItsOwnerReads() throws {
        let files = try Files()
        let text = #"{"clients": [{"clientId": "backoffice", "clientSecret": "s3cret"}]}"#
        let readable = try files.write("readable.json", text, mode: 0o644)
        let refused = try #require(Self.loadError(readable))
        #expect(refused.contains("holds the client secret of backoffice") && refused.contains("mode 644"), "\(refused)")
        #expect(refused.contains("clientSecretFile") && refused.contains("chmod 600"))
        #expect(!refused.contains("s3cret"))

        let ownerOnly = try files.write("owner.json", text, mode: 0o600)
        let secrets = try DaemonConfigurationFile.load(path: ownerOnly).clientSecrets()
        #expect(secrets["backoffice"]?.secret == "s3cret")
    }

    @Test func aSecretFileIsReadTrimmedAndOnlyWhenPrivate() throws {
        let files = try Files()
        let secretFile = try files.write("backoffice.secret", "  s3cret-from-file\n", mode: 0o600)
        let config = try files.write(
            "config.json",
            #"{"clients": [{"clientId": "backoffice", "clientSecretFile": "\#(secretFile)", "#
                + #""clientSecretMethod": "client_secret_post"}]}"#, mode: 0o644)
        let secrets = try DaemonConfigurationFile.load(path: config).clientSecrets()
        #expect(secrets["backoffice"]?.secret == "s3cret-from-file")
        #expect(secrets["backoffice"]?.method == .post)

        chmod(secretFile, 0o640)
        do {
            _ = try DaemonConfigurationFile.load(path: config).clientSecrets()
            Issue.record("a secret file its group can read was accepted")
        } catch {
            #expect(error.description.contains("can be read by others (mode 640)"), "\(error)")
            #expect(!error.description.contains("s3cret"))
        }

        let both = try files.write(
            "both.json",
            #"{"clients": [{"clientId": "b", "clientSecret": "x", "clientSecretFile": "\#(secretFile)"}]}"#, mode: 0o600
        )
        #expect(throws: DaemonError.self) { try DaemonConfigurationFile.load(path: both).clientSecrets() }
    }

    /// What a file someone else could write would decide, were brokerd to read it.
    static let takeover =
        #"{"authority": "https://attacker.example/v2.0", "allowPasswordGrant": true, "clients": [{"clientId": "a"}]}"#

    @Test("the user's file: refused when others may write it or another user owns it, as the administrator's is")
    func theUsersFileIsCheckedLikeTheAdministrators() throws {
        let files = try Files()
        let user = getuid()
        for mode: mode_t in [0o666, 0o646, 0o620] {
            let path = try files.write("writable-\(String(mode, radix: 8)).json", Self.takeover, mode: mode)
            let refused = try #require(Self.loadError(path), "mode \(String(mode, radix: 8)) was accepted")
            #expect(
                refused.contains(
                    "the configuration file \(path) must belong to this user (uid \(user)) or root and be writable by "
                        + "nobody else (owner \(user), mode \(String(mode, radix: 8)))"), "\(refused)")
            #expect(refused.contains("fix it with: chmod go-w \(path)"), "\(refused)")
        }
        for mode: mode_t in [0o644, 0o600, 0o444] {
            let path = try files.write("fine-\(String(mode, radix: 8)).json", Self.takeover, mode: mode)
            #expect(Self.loadError(path) == nil, "mode \(String(mode, radix: 8))")
        }
    }

    @Test(
        "the user's file: refused when it belongs to another user, even read-only",
        .enabled(if: getuid() == 0, "needs root to give a file to another uid"))
    func anotherUsersFile() throws {
        let files = try Files()
        let path = try files.write("foreign.json", Self.takeover, mode: 0o644)
        #expect(chown(path, 4242, 4242) == 0)
        let refused = try #require(Self.loadError(path))
        #expect(refused.contains("(owner 4242, mode 644)"), "\(refused)")
        #expect(refused.contains("copy it to a file of your own (uid 0)"), "\(refused)")
    }

    @Test("a named pipe, a device or a directory is refused at once, named, for either file")
    func notARegularFile() throws {
        let files = try Files()
        let fifo = files.path + "/fifo.json"
        #expect(mkfifo(fifo, 0o644) == 0)
        // Without a writer, reading a FIFO would wait for ever: the start hung.
        let fifoError = try #require(Self.loadError(fifo))
        #expect(fifoError.contains("\(fifo) is a named pipe (FIFO), not a regular file"), "\(fifoError)")
        let device = try #require(Self.loadError("/dev/zero"))
        #expect(device.contains("/dev/zero is a character device, not a regular file"), "\(device)")
        let directory = try #require(Self.loadError(files.path))
        #expect(directory.contains("is a directory, not a regular file: give --config a regular file"), "\(directory)")

        guard !FileManager.default.fileExists(atPath: DaemonConfigurationFile.administratorPath) else { return }
        do {
            _ = try DaemonConfigurationFile.loadAdministrator(fallback: fifo)
            Issue.record("an administrator's FIFO was accepted")
        } catch {
            #expect(
                error.description.contains("the administrator's configuration \(fifo) is a named pipe (FIFO)"),
                "\(error)")
        }
    }

    @Test(
        "loose JSON is refused, naming the key: a key twice, null, a trailing comma, a byte order mark, comments",
        arguments: [
            (
                #"{"clients": [{"clientId": "a", "allowedExecutables": ["/usr/bin/a"]}], "clients": []}"#,
                #"has the key "clients" twice at the top level"#
            ),
            (
                #"{"clients": [{"clientId": "a", "allowedExecutables": ["/usr/bin/a"], "allowedExecutables": []}]}"#,
                #"has the key "allowedExecutables" twice in clients[0]"#
            ),
            (
                #"{"authority": "https://a.example", "\u0061uthority": "https://b.example"}"#,
                #"has the key "authority" twice at the top level"#
            ),
            (#"{"clients": null}"#, "has null for clients: leave the key out to keep its default, or give a value"),
            (#"{"allowPasswordGrant": null}"#, "has null for allowPasswordGrant"),
            (#"{"clients": [{"clientId": "a", "name": null}]}"#, "has null for clients[0].name"),
            (
                #"{"clients": [{"clientId": "a", "allowedExecutables": [null]}]}"#,
                "has null for clients[0].allowedExecutables[0]"
            ),
            (#"{"deviceMode": "shared",}"#, "trailing commas are not JSON"),
            (#"{"compatibility": ["microsoft-broker1",]}"#, "trailing commas are not JSON"),
            ("\u{FEFF}{}", "starts with a byte order mark"),
            (#"{} // the kiosk's"#, "comments are not JSON"),
        ] as [(String, String)])
    func looseJSON(_ text: String, _ why: String) throws {
        try Self.expectRefused(text, saying: why)
    }

    /// `text` in a configuration file of its owner's alone must be refused with a message that
    /// names the file, says `why`, and prints no control character.
    static func expectRefused(_ text: String, saying why: String) throws {
        let files = try Files()
        let path = try files.write("refused.json", text, mode: 0o600)
        let refused = try #require(Self.loadError(path), "accepted: \(text)")
        #expect(refused.hasPrefix("the configuration file \(path)"), "\(refused)")
        #expect(refused.contains(why), "\(refused)")
        #expect(refused.unicodeScalars.allSatisfy { $0.properties.generalCategory != .control }, "\(refused)")
    }

    @Test(
        "a control character in any string or key is refused, naming where it stands",
        arguments: [
            (#"{"tenantId": "contoso\u0000evil"}"#, "a control character (U+0000) in tenantId"),
            (
                #"{"clients": [{"clientId": "a", "allowedExecutables": ["/usr/bin/a\u0000/tmp/b"]}]}"#,
                "a control character (U+0000) in clients[0].allowedExecutables[0]"
            ),
            (#"{"clients": [{"clientId": "a", "name": "Mail\u001b[2J"}]}"#, "(U+001B) in clients[0].name"),
            (#"{"clients": [{"clientId": "a", "name": "Mail\n"}]}"#, "(U+000A) in clients[0].name"),
            ("{\"clients\": [{\"clientId\": \"a\", \"name\": \"Mail\u{7F}\"}]}", "(U+007F) in clients[0].name"),
            ("{\"clients\": [{\"clientId\": \"a\", \"name\": \"Mail\u{85}\"}]}", "(U+0085) in clients[0].name"),
            (#"{"tenantId\u0000": "t"}"#, "a control character (U+0000) in a key at the top level"),
        ] as [(String, String)])
    func controlCharacters(_ text: String, _ why: String) throws {
        try Self.expectRefused(text, saying: why)
    }

    @Test(
        "settings that could never take effect are refused, naming the client and the fix",
        arguments: [
            (
                #"{"clients": [{"clientId": "kiosk", "allowedExecutables": ["kiosk-app"]}]}"#,
                #"clients[0].allowedExecutables[0] is "kiosk-app", not an absolute path"#
            ),
            (
                #"{"clients": [{"clientId": "kiosk", "allowedExecutables": []}]}"#,
                "clients[0].allowedExecutables is empty, so no program could use kiosk"
            ),
            (
                #"{"clients": [{"clientId": "a"}, {"clientId": "b"}, {"clientId": "a", "allowedExecutables": ["/x"]}]}"#,
                #"clients[0] and clients[2] both have clientId "a": keep one entry per app"#
            ),
            (#"{"clients": [{"clientId": ""}]}"#, "clients[0].clientId is not one an app can send (clientId is empty)"),
            (#"{"clients": [{"clientId": "mail app"}]}"#, "clients[0].clientId is not one an app can send"),
            (
                #"{"clients": [{"clientId": "a", "clientSecretMethod": "client_secret_post"}]}"#,
                "clients[0] (clientId a) has a clientSecretMethod but no clientSecret or clientSecretFile"
            ),
            (
                #"{"clients": [{"clientId": "a", "clientSecretFile": "/s", "clientSecretMethod": "private_key_jwt"}]}"#,
                #"clients[0] (clientId a) has clientSecretMethod "private_key_jwt": it must be client_secret_basic"#
            ),
            (
                #"{"clients": [{"clientId": "a", "clientSecretFile": "a.secret"}]}"#,
                #"clients[0].clientSecretFile is "a.secret", not an absolute path"#
            ),
        ] as [(String, String)])
    func settingsThatCannotTakeEffect(_ text: String, _ why: String) throws {
        try Self.expectRefused(text, saying: why)
    }

    @Test(
        "defaultScopes: an array of scopes, or refused naming the key, what it takes and an example",
        arguments: [
            (
                #"{"clients": [{"clientId": "mail", "defaultScopes": "User.Read Mail.Read"}]}"#,
                #"clients[0].defaultScopes is "User.Read Mail.Read"; it takes an array of strings, e.g. ["User.Read", "#
            ),
            (
                #"{"clients": [{"clientId": "a"}, {"clientId": "mail", "defaultScopes": ["User.Read", 7]}]}"#,
                #"clients[1].defaultScopes is ["User.Read", 7]; it takes an array of strings"#
            ),
            (
                #"{"clients": [{"clientId": "mail", "defaultScopes": ["User.Read Mail.Read"]}]}"#,
                #"clients[0].defaultScopes[0] is "User.Read Mail.Read", not a scope an app could ask for"#
            ),
            (
                #"{"clients": [{"clientId": "mail", "defaultScope": ["User.Read"]}]}"#,
                #"unknown key "defaultScope" in clients[0]"#
            ),
        ] as [(String, String)])
    func defaultScopesRefused(_ text: String, _ why: String) throws {
        try Self.expectRefused(text, saying: why)
    }

    @Test func defaultScopesAreReadPerClient() throws {
        let files = try Files()
        let path = try files.write(
            "scopes.json",
            #"{"clients": [{"clientId": "mail", "defaultScopes": ["User.Read", "Mail.Read"]}, {"clientId": "notes"}]}"#,
            mode: 0o644)
        #expect(try DaemonConfigurationFile.load(path: path).defaultScopes() == ["mail": ["User.Read", "Mail.Read"]])
    }

    @Test(
        "a value of the wrong type names the file, the key, what it holds and the values the key takes",
        arguments: [
            (#"{"deviceMode": "kiosk"}"#, #"deviceMode is "kiosk"; it takes "shared" or "default""#),
            (#"{"authority": 7}"#, #"authority is 7; it takes a URL"#),
            (#"{"tenantId": true}"#, "tenantId is true; it takes a string"),
            (#"{"clients": {"clientId": "a"}}"#, "clients is an object; it takes an array of objects, one per app"),
            (#"{"clients": ["mail-app"]}"#, #"clients[0] is "mail-app"; it takes objects, one per app"#),
            (#"{"clients": [{"name": "Mail"}]}"#, "clients[0] has no clientId; add it: clientId takes a string"),
            (#"{"clients": [{"clientId": 7}]}"#, "clients[0].clientId is 7; it takes a string"),
            (
                #"{"clients": [{"clientId": "a", "name": ["Mail"]}]}"#,
                #"clients[0].name is ["Mail"]; it takes a string"#
            ),
            (
                #"{"clients": [{"clientId": "a", "clientSecret": 1}]}"#,
                "clients[0].clientSecret is 1; it takes a string"
            ),
            (
                #"{"clients": [{"clientId": "a", "clientSecretFile": false}]}"#,
                "clients[0].clientSecretFile is false; it takes an absolute path"
            ),
            (
                #"{"clients": [{"clientId": "a", "clientSecretMethod": 2}]}"#,
                #"clients[0].clientSecretMethod is 2; it takes "client_secret_basic" or "client_secret_post""#
            ),
            (
                #"{"clients": [{"clientId": "a", "allowedExecutables": "/usr/bin/a"}]}"#,
                #"clients[0].allowedExecutables is "/usr/bin/a"; it takes an array of absolute paths"#
            ),
            (
                #"{"tokenStorage": "keyring"}"#,
                #"tokenStorage is "keyring"; it takes "secret-service", "plaintext-file" or "memory""#
            ),
            (#"{"allowPasswordGrant": "yes"}"#, #"allowPasswordGrant is "yes"; it takes true or false"#),
            (
                #"{"compatibility": "microsoft-broker1"}"#,
                #"compatibility is "microsoft-broker1"; it takes an array of protocol names, each "microsoft-broker1""#
            ),
            (
                #"{"browserSignOut": "sometimes"}"#,
                #"browserSignOut is "sometimes"; it takes "always", "when-asked" or "never""#
            ),
            (#"{"maxClients": 0}"#, "maxClients is 0; it takes a whole number of clientIds from 1 to 1000000"),
            (#"{"maxClients": 1.5}"#, "maxClients is 1.5; it takes a whole number"),
            (#"{"signOutAfterReboot": 1}"#, "signOutAfterReboot is 1; it takes true or false"),
            (#"{"clearOnSignOut": "Downloads"}"#, #"clearOnSignOut is "Downloads"; it takes an array of paths"#),
            (
                #"{"signOutOnLock": "false"}"#,
                #"signOutOnLock is "false"; it takes true or false, written without quotes"#
            ),
            (
                #"{"idleSignOutSeconds": "300"}"#,
                #"idleSignOutSeconds is "300"; it takes a whole number of seconds from 0 to 86400, written without quotes"#
            ),
            (#"{"idleWarningSeconds": -1}"#, "idleWarningSeconds is -1; it takes a whole number of seconds from 0"),
            (#"{"sessionCheckSeconds": 86401}"#, "sessionCheckSeconds is 86401; it takes a whole number of seconds"),
            (
                #"{"sharedSignals": "https://ssf.example"}"#,
                #"sharedSignals is "https://ssf.example"; it takes an object"#
            ),
            (
                #"{"sharedSignals": {"transmitter": 7, "clientId": "b"}}"#,
                "sharedSignals.transmitter is 7; it takes a URL"
            ),
            (
                #"{"sharedSignals": {"transmitter": "https://ssf.example"}}"#,
                "sharedSignals has no clientId; add it: clientId takes a string"
            ),
            (
                #"{"sharedSignals": {"transmitter": "https://ssf.example", "clientId": "b", "pollSeconds": 0}}"#,
                "sharedSignals.pollSeconds is 0; it takes a whole number of seconds from 1 to 3600"
            ),
            (
                #"{"sharedSignals": {"transmitter": "https://ssf.example", "clientId": "b", "scope": ["a"]}}"#,
                #"sharedSignals.scope is ["a"]; it takes a string"#
            ),
            (#"{"clientCapabilities": "cp1"}"#, #"clientCapabilities is "cp1"; it takes an array of capability names"#),
            (
                #"{"clientCapabilities": ["cp 1"]}"#,
                #"clientCapabilities holds "cp 1"; it takes short names such as cp1"#
            ),
            (
                #"["deviceMode", "shared"]"#,
                #"the file is ["deviceMode", "shared"]; it takes a JSON object of settings"#
            ),
            (
                #"{"loopbackRedirectPorts": "53109-53100"}"#,
                #"loopbackRedirectPorts is "53109-53100"; it takes a port of 127.0.0.1 from 1024 to 65535, or a range"#
            ),
            (#"{"loopbackRedirectPorts": 80}"#, "loopbackRedirectPorts is 80; it takes a port of 127.0.0.1 from 1024"),
            (#"{"loopbackRedirectPorts": 65536}"#, "loopbackRedirectPorts is 65536; it takes a port"),
            (#"{"loopbackRedirectPorts": "50000-50100"}"#, #"loopbackRedirectPorts is "50000-50100"; it takes"#),
            (#"{"loopbackRedirectPorts": "53100-"}"#, #"loopbackRedirectPorts is "53100-"; it takes"#),
            (#"{"loopbackRedirectPorts": "any"}"#, #"loopbackRedirectPorts is "any"; it takes"#),
            (#"{"loopbackRedirectPorts": "+5310"}"#, #"loopbackRedirectPorts is "+5310"; it takes"#),
            (#"{"loopbackRedirectPorts": [53100]}"#, "loopbackRedirectPorts is [53100]; it takes a port"),
            (
                #"{"phoneApprovalLoginHint": {"username": "{username}"}}"#,
                "phoneApprovalLoginHint is an object; it takes a template of CIBA's login_hint"
            ),
            (
                #"{"phoneApprovalLoginHint": "{\"username\":\"alice\"}"}"#,
                #"phoneApprovalLoginHint is "{"username":"alice"}"; it has no {username}, so it would name the same "#
                    + "person whoever signs in: put {username} where the username goes; it takes a template"
            ),
            (
                #"{"phoneApprovalLoginHint": "user"}"#,
                #"phoneApprovalLoginHint is "user"; it has no {username}"#
            ),
            (
                #"{"phoneApprovalLoginHint": "{\"username\":\"{username}\""}"#,
                #"phoneApprovalLoginHint is "{"username":"{username}""; it is not JSON once a username is put in"#
            ),
        ] as [(String, String)])
    func wrongTypes(_ text: String, _ why: String) throws {
        try Self.expectRefused(text, saying: why)
    }

    /// Every key of the file and of a client's entry is among the cases above: a key added later
    /// gets its message checked too.
    @Test func everyKeyHasAWrongTypeCase() throws {
        let file = try String(contentsOfFile: #filePath, encoding: .utf8)
        for key in DaemonConfigurationFile.knownKeys + DaemonConfigurationFile.Client.knownKeys
            + DaemonConfigurationFile.SharedSignals.knownKeys
        {
            #expect(file.contains("\(key) is ") || file.contains(".\(key) is "), "no wrong-type case for \(key)")
        }
    }

    @Test(
        "an inactivity warning that could not take effect stops the start, naming both keys and the fix",
        arguments: [
            (DaemonConfigurationFile(idleWarningSeconds: 60), "idleSignOutSeconds is not set"),
            (DaemonConfigurationFile(idleSignOutSeconds: 0, idleWarningSeconds: 60), "idleSignOutSeconds is 0"),
            (
                DaemonConfigurationFile(idleSignOutSeconds: 30, idleWarningSeconds: 60),
                "idleWarningSeconds is 60, not less than idleSignOutSeconds (30)"
            ),
            (
                DaemonConfigurationFile(idleSignOutSeconds: 60, idleWarningSeconds: 60),
                "not less than idleSignOutSeconds"
            ),
        ])
    func idleWarningWithoutEffect(_ configuration: DaemonConfigurationFile, _ why: String) throws {
        #expect {
            try configuration.checkSettingsTakeEffect()
        } throws: { error in
            "\(error)".contains(why) && "\(error)".contains("idleWarningSeconds")
        }
    }

    @Test func idleWarningsThatTakeEffect() throws {
        try DaemonConfigurationFile(idleSignOutSeconds: 300, idleWarningSeconds: 60).checkSettingsTakeEffect()
        try DaemonConfigurationFile(idleSignOutSeconds: 300).checkSettingsTakeEffect()
        try DaemonConfigurationFile(idleWarningSeconds: 0).checkSettingsTakeEffect()
        // The administrator's sign-out with the user's warning: checked together.
        try DaemonConfigurationFile(idleWarningSeconds: 30).overridden(
            by: DaemonConfigurationFile(idleSignOutSeconds: 120)
        ).checkSettingsTakeEffect()
    }

    @Test func aMissingAdministratorFileGivenByPathIsAnError() throws {
        let files = try Files()
        let missing = files.path + "/brokre.conf"
        #expect {
            _ = try DaemonConfigurationFile.loadAdministratorFile(fallback: missing)
        } throws: { error in
            "\(error)".contains("--admin-config \(missing): no such file")
        }
    }
}
