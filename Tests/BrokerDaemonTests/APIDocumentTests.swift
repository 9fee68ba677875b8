import DBus
import Foundation
import Testing

@testable import BrokerCore
@testable import BrokerDaemon

/// docs/dbus-api.md is what an app developer reads instead of the code: its lists of methods,
/// signals, properties, errors (per method and in all), options and dictionary keys must be the
/// code's. The contract's lists come from the interface brokerd serves (generated from the XML,
/// which `ContractTests` compares with the live introspection) and from `Broker1Method` (its
/// `Options` and `Errors` annotations); the dictionaries' keys from what `BusMarshalling` puts on
/// the bus for values with every field filled in.
@Suite("docs/dbus-api.md lists what the code has")
struct APIDocumentTests {
    static let document: String = {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../docs/dbus-api.md").standardized.path
        return (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }()

    static let interface = DBusInterfaceDescription.broker1

    /// The lines of the `## title` section, up to the next `## `.
    static func section(_ title: String) -> [Substring] {
        let lines = document.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(of: Substring("## \(title)")) else { return [] }
        let rest = lines[(start + 1)...]
        let end = rest.firstIndex { $0.hasPrefix("## ") } ?? rest.endIndex
        return Array(rest[..<end])
    }

    /// The `### `name`` subsections of `lines`, in order, each with its lines.
    static func subsections(_ lines: [Substring]) -> [(name: String, lines: [Substring])] {
        var result: [(name: String, lines: [Substring])] = []
        for line in lines {
            if line.hasPrefix("### ") {
                result.append((String(line.dropFirst(4)).trimmingCharacters(in: CharacterSet(charactersIn: "`")), []))
            } else if !result.isEmpty {
                result[result.count - 1].lines.append(line)
            }
        }
        return result
    }

    /// Every `word` in backticks in `text`.
    static func quoted(_ text: some StringProtocol) -> [String] {
        text.split(separator: "`", omittingEmptySubsequences: false).enumerated()
            .filter { $0.offset % 2 == 1 }.map { String($0.element) }
    }

    /// The rows of the Markdown tables in `lines`: their cells, header and rule left out.
    static func rows(_ lines: [Substring]) -> [[String]] {
        let table = lines.filter { $0.hasPrefix("|") }
        return table.enumerated().compactMap { index, line in
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.trimmingCharacters(in: .whitespaces) }
            let isRule = cells.allSatisfy { $0.allSatisfy { $0 == "-" || $0 == ":" } }
            let isHeader = index + 1 < table.count && table[index + 1].hasPrefix("|---")
            return isRule || isHeader ? nil : cells
        }
    }

    /// The item `- **label**:` of a method's section, with its continuation lines.
    static func item(_ label: String, in lines: [Substring]) -> [Substring] {
        guard let start = lines.firstIndex(where: { $0.hasPrefix("- **\(label)**") }) else { return [] }
        let rest = lines[(start + 1)...]
        let end = rest.firstIndex { $0.hasPrefix("- ") || $0.isEmpty } ?? rest.endIndex
        return [lines[start]] + rest[..<end]
    }

    static func signature(_ arguments: [DBusInterfaceDescription.Argument]) -> String {
        "(" + arguments.map { "\($0.signature) \($0.name)" }.joined(separator: ", ") + ")"
    }

    /// The errors every method may reply (the interface's `Errors` annotation).
    static let commonErrors: Set<String> = Set(
        interface.annotations.first { $0.name == "io.shareddevice.Contract.Errors" }?.value.split(separator: " ")
            .map(String.init) ?? [])

    @Test("the methods, in the contract's order, each with its arguments")
    func methods() {
        let documented = Self.subsections(Self.section("Methods"))
        #expect(documented.map(\.name) == Broker1Method.allCases.map(\.rawValue))
        for method in Self.interface.methods {
            let lines = documented.first { $0.name == method.name }?.lines ?? []
            let expected = "`\(Self.signature(method.inArguments)) → \(Self.signature(method.outArguments))`"
            #expect(lines.contains { $0.hasPrefix(expected) }, "\(method.name): no line starting \(expected)")
        }
    }

    @Test("each method's options: the keys and types the contract lists, which brokerd enforces")
    func options() {
        let documented = Self.subsections(Self.section("Methods"))
        for method in Broker1Method.allCases {
            let item = Self.item("Options", in: documented.first { $0.name == method.rawValue }?.lines ?? [])
            #expect(!item.isEmpty, "\(method.rawValue) says nothing of its options")
            let keys: [String] = item.dropFirst().compactMap { line in
                let text = line.trimmingCharacters(in: .whitespaces)
                guard text.hasPrefix("- `"), let key = Self.quoted(text).first,
                    let open = text.firstIndex(of: "("), let close = text.firstIndex(of: ")"), open < close
                else { return nil }
                return "\(key):\(text[text.index(after: open)..<close])"
            }
            #expect(keys == method.options.map { "\($0.key):\($0.signature)" }, "\(method.rawValue)")
            if method.options.isEmpty { #expect(item.first?.hasSuffix("none.") == true, "\(method.rawValue)") }
        }
    }

    @Test("the errors every method may reply, and each method's own")
    func errorsPerMethod() {
        let methods = Self.section("Methods")
        let introduction = methods.prefix { !$0.hasPrefix("### ") }.joined(separator: "\n")
        let common = introduction.components(separatedBy: "\n\n").first { $0.contains("Every method may also") }
        #expect(
            Set(Self.quoted(common ?? "").filter { BrokerErrorCode(rawValue: $0) != nil }) == Self.commonErrors)
        #expect(!Self.commonErrors.isEmpty)
        for (name, lines) in Self.subsections(methods) {
            guard let method = Broker1Method(rawValue: name) else { continue }
            let item = Self.item("Errors", in: lines).joined(separator: " ")
            #expect(!item.isEmpty, "\(name) lists no errors")
            let documented = Set(Self.quoted(item))
            let contract = Set(method.errors.map(\.rawValue))
            // The doc may name an error of every method where the method gives it a meaning of its own.
            #expect(documented.subtracting(Self.commonErrors) == contract.subtracting(Self.commonErrors), "\(name)")
            #expect(documented.isSubset(of: contract), "\(name): \(documented.subtracting(contract)) not in the XML")
        }
    }

    @Test("the error table names every error of BrokerErrorCode, and every error a method lists is one")
    func errorTable() {
        let names = Self.rows(Self.section("Errors")).compactMap { Self.quoted($0.first ?? "").first }
        #expect(names.sorted() == BrokerErrorCode.allCases.map(\.rawValue).sorted())
    }

    @Test("the signals, each with its arguments")
    func signals() {
        let documented = Self.subsections(Self.section("Signals"))
        #expect(Set(documented.map(\.name)) == Set(Self.interface.signals.map(\.name)))
        for signal in Self.interface.signals {
            let lines = documented.first { $0.name == signal.name }?.lines ?? []
            let expected = "`\(Self.signature(signal.arguments))`"
            #expect(lines.contains { $0.hasPrefix(expected) }, "\(signal.name): no line starting \(expected)")
        }
        // The one key AccountChanged adds to an account.
        let change = DeviceAccountChange(current: nil, previous: Self.account, reason: .signedOut, cause: .idle)
        let previous = change.departed?.busValue.vardict ?? [:]
        let added = Set(previous.keys).subtracting((Self.account.busValue.vardict ?? [:]).keys)
        #expect(added == [AccountKey.signOutCause])
        let accountChanged = documented.first { $0.name == Broker1Signal.accountChanged.rawValue }?.lines ?? []
        #expect(accountChanged.joined(separator: " ").contains("`\(AccountKey.signOutCause)` (s)"))
    }

    @Test("the properties, with their types")
    func properties() {
        let documented = Self.rows(Self.section("Properties")).map { row in
            "\(Self.quoted(row.first ?? "").first ?? ""):\(row.count > 1 ? row[1] : "")"
        }
        #expect(documented == Self.interface.properties.map { "\($0.name):\($0.signature)" })
    }

    static let account = Account(
        username: "alice@contoso.example", identifier: "oid.tid", tenantId: "tid", environment: "login.example",
        name: "Alice")

    /// Each dictionary the broker returns, as marshalled with every field filled in.
    static var dictionaries: [(title: String, value: DBusValue)] {
        let tokens = AppTokens(
            accessToken: "a", expiresOn: 1, idToken: "i", scopes: Scopes(["User.Read"]), account: account,
            authority: "https://login.example/t/v2.0", correlationId: "c")
        let information = DeviceInformation(
            deviceMode: .shared, brokerVersion: "1", deviceId: "d", tenantId: "t", authority: "https://a",
            extraDeviceInformation: [:], singleSignOn: [.nativeSSO])
        let code: SignInChallenge = .codeChallenge(CodeChallenge(channel: "email", sentTo: "a***", codeLength: 8))
        let device: SignInChallenge = .deviceCodeChallenge(
            DeviceCodeChallenge(
                channel: "device-code", verificationUri: "https://v", verificationUriComplete: "https://v?c",
                userCode: "U", expiresIn: 900, interval: 5))
        let phone: SignInChallenge = .phoneApprovalChallenge(
            PhoneApprovalChallenge(bindingMessage: "KTW-482", expiresIn: 120, interval: 5))
        let keys = { (value: DBusValue) in (value.vardict ?? [:]).map { "\($0.key):\($0.value.signature)" } }
        let challenges = Set(keys(code.busValue)).union(keys(device.busValue)).union(keys(phone.busValue))
        let options = SignInOptions(flows: [.browser], singleSignOn: [.nativeSSO])
        return [
            ("Account", account.busValue),
            ("Token result", tokens.result.busValue),
            ("Device information", information.busValue),
            ("Sign-in options", options.busValue),
            // Every kind of challenge in one table; the keys are compared as a set below.
            ("Challenge", .strings(challenges.sorted())),
            ("Sign-out result", SignOutOutcome().busValue),
        ]
    }

    @Test("each dictionary's keys and their types are those the broker puts on the bus")
    func dictionaries() {
        let documented = Self.subsections(Self.section("Dictionaries"))
        #expect(documented.map(\.name) == Self.dictionaries.map(\.title))
        for (title, value) in Self.dictionaries {
            let rows = Self.rows(documented.first { $0.name == title }?.lines ?? [])
            let keys = Set(rows.map { "\(Self.quoted($0.first ?? "").first ?? ""):\($0.count > 1 ? $0[1] : "")" })
            let marshalled = Set(
                value.stringArray ?? (value.vardict ?? [:]).map { "\($0.key):\($0.value.signature)" })
            #expect(keys == marshalled, "\(title)")
        }
    }
}
