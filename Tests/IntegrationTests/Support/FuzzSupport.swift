import BrokerAPI
import DBus
import Foundation

// The generator behind BusFuzzTests: seeded, reproducible calls of every kind a hostile or
// careless caller can make on the bus, each with what the broker must answer.

// MARK: - Randomness

/// SplitMix64: the same sequence for a seed on every machine and every run (the fuzz and crash tests print theirs).
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    /// The generator of call `index` of a run: each call depends only on (seed, index), so one
    /// call can be replayed alone and calls can run in any order or concurrently.
    init(seed: UInt64, index: Int) {
        var mixer = SeededGenerator(seed: seed ^ (UInt64(truncatingIfNeeded: index) &* 0xD1B5_4A32_D192_ED03))
        state = mixer.next()
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// True `percent` times in a hundred.
    mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &self) < percent }
    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &self) }
    mutating func pick<T>(_ items: [T]) -> T { items[Int.random(in: 0..<items.count, using: &self)] }
}

// MARK: - What the generator knows

/// Names, limits and the few valid values the generator mixes in.
enum Fuzz {
    static let service = BrokerNames.busName
    static let path = BrokerNames.objectPath
    static let interface = BrokerNames.interface
    static let properties = "org.freedesktop.DBus.Properties"
    static let introspectable = "org.freedesktop.DBus.Introspectable"
    static let peer = "org.freedesktop.DBus.Peer"

    static func broker(_ name: String) -> String { BrokerNames.errorPrefix + name }
    static func bus(_ name: String) -> String { "org.freedesktop.DBus.Error." + name }
    static let invalidArgs = bus("InvalidArgs")

    /// The contract's methods and their in-signatures, as generated from dbus/io.shareddevice.Broker1.xml.
    static let methods: [(name: String, signature: String)] = Broker1Method.allCases.map {
        ($0.rawValue, $0.inSignature)
    }
    static let standardMethods: [(interface: String, name: String, signature: String)] = [
        (properties, "Get", "ss"), (properties, "GetAll", "s"), (properties, "Set", "ssv"),
        (introspectable, "Introspect", ""), (peer, "Ping", ""), (peer, "GetMachineId", ""),
    ]
    static let propertyNames = ["DeviceMode", "CurrentAccount", "BrokerVersion"]
    /// Paths a caller may try; only the broker's has an object, its parents have children.
    static let paths = [
        "/io/shareddevice/Broker1", "/", "/io", "/io/shareddevice", "/io/shareddevice/Broker1/x",
        "/io/shareddevice/Broker2", "/org/freedesktop/DBus", "/a/b_c/D9",
    ]

    static let maxIdentifier = 256, maxUsername = 4096, maxPassword = 4096, maxScopes = 64, maxScope = 256
}

/// What the run knows about the broker it fuzzes: the apps it lets in, the signed-in account, and
/// the answers the read-only calls gave before the run (they must give the same ones throughout).
struct FuzzContext: Sendable {
    var knownClients: [String]
    var accountId: String
    var usernames: [String]
    var password: String
    /// `GetCurrentAccount` of a known client: (alice, alice) once the client has seen her.
    var currentAccount: [DBusValue]
    /// `GetAccounts` of a known client.
    var accounts: [DBusValue]
    var deviceInformation: [DBusValue]
    /// `GetSignInOptions` of a known client.
    var signInOptions: [DBusValue]
    /// Properties.GetAll of the broker's interface.
    var allProperties: [DBusValue]
    /// Introspect's answer (or error name) per path of ``Fuzz/paths``.
    var introspection: [String: Result<[DBusValue], DBusError>]
}

// MARK: - One call and what it must get

/// What a call must get back.
struct FuzzExpectation: Sendable {
    /// The error names the call may get; empty when it must succeed.
    var errors: Set<String>
    /// Whether a success is acceptable at all (read-only calls); state-changing calls must fail.
    var mayAnswer: Bool
    /// The exact answer a success must be, when known.
    var answer: [DBusValue]?

    static func fails(_ errors: Set<String>) -> FuzzExpectation { FuzzExpectation(errors: errors, mayAnswer: false) }
    static func answers(_ answer: [DBusValue]?, orFails errors: Set<String> = []) -> FuzzExpectation {
        FuzzExpectation(errors: errors, mayAnswer: true, answer: answer)
    }

    /// Why `outcome` breaks the expectation, or nil when it does not.
    func problem(with outcome: Result<[DBusValue], DBusError>) -> String? {
        switch outcome {
        case .success(let values):
            if !mayAnswer { return "succeeded, but must have been refused: \(FuzzCall.describe(values))" }
            if let answer, answer != values {
                return "answered \(FuzzCall.describe(values)), expected \(FuzzCall.describe(answer))"
            }
            return nil
        case .failure(let error):
            if errors.contains(error.name) { return nil }
            return
                "got \(error.name) (\(error.message.prefix(200))), expected \(mayAnswer ? "an answer or " : "")one of "
                + "\(errors.sorted())"
        }
    }
}

/// One generated call.
struct FuzzCall: Sendable {
    var index: Int
    /// What kind of call the generator meant, for the figures.
    var kind: String
    var path: String
    /// Empty: sent without an interface field (the broker dispatches by member name).
    var interface: String
    var member: String
    var arguments: [DBusValue]
    var expectation: FuzzExpectation

    var description: String {
        "#\(index) [\(kind)] \(path) "
            + "\(interface.isEmpty ? "(no interface)" : interface).\(member)(\(FuzzCall.describe(arguments)))"
    }

    /// Values as a person reads them: types, long strings cut, counts kept.
    static func describe(_ values: [DBusValue]) -> String {
        let text = values.map { describe($0, depth: 0) }.joined(separator: ", ")
        return text.count > 600 ? String(text.prefix(600)) + "…" : text
    }

    static func describe(_ value: DBusValue, depth: Int) -> String {
        if depth > 4 { return "…" }
        switch value {
        case .string(let s), .objectPath(let s), .signature(let s):
            let shown =
                s.count > 40 ? String(s.prefix(40)).debugDescription + "…(\(s.utf8.count) bytes)" : s.debugDescription
            return "\(value.signature):\(shown)"
        case .array(let element, let items):
            let shown = items.prefix(4).map { describe($0, depth: depth + 1) }.joined(separator: ", ")
            return "a\(element)[\(shown)\(items.count > 4 ? ", …\(items.count) items" : "")]"
        case .dictionary(let k, let v, let entries):
            let shown = entries.prefix(4).map {
                "\(describe($0.key, depth: depth + 1)): \(describe($0.value, depth: depth + 1))"
            }
            .joined(separator: ", ")
            return "a{\(k)\(v)}{\(shown)\(entries.count > 4 ? ", …\(entries.count) entries" : "")}"
        case .structure(let fields):
            return "(" + fields.map { describe($0, depth: depth + 1) }.joined(separator: ", ") + ")"
        case .variant(let inner):
            return "<\(describe(inner, depth: depth + 1))>"
        default:
            return "\(value.signature):\(value)"
        }
    }
}

// MARK: - The generator

/// Makes call `index` of the run with `seed`.
struct FuzzGenerator: Sendable {
    let seed: UInt64
    let context: FuzzContext

    func call(_ index: Int) -> FuzzCall {
        var rng = SeededGenerator(seed: seed, index: index)
        var call: FuzzCall
        switch rng.int(0...99) {
        case 0..<45: call = hostileValues(&rng)
        case 45..<70: call = wrongSignature(&rng)
        case 70..<82: call = propertiesCall(&rng)
        case 82..<87: call = introspectOrPeer(&rng)
        case 87..<95: call = readOnly(&rng)
        default: call = unknownTarget(&rng)
        }
        call.index = index
        // The broker's members dispatch by name without an interface field too.
        if call.interface == Fuzz.interface, call.kind != "unknown", rng.chance(15) { call.interface = "" }
        return call
    }

    // MARK: Right signature, hostile values

    /// A contract method with the right types. State-changing methods always get at least one
    /// argument the rules refuse (InputRules, an unknown clientId, account or flow, a mistyped
    /// option), so every such call must fail and change nothing; the others may be valid.
    private func hostileValues(_ rng: inout SeededGenerator) -> FuzzCall {
        let method = rng.pick(Broker1Method.allCases)
        var arguments: [DBusValue]
        var errors: Set<String>
        var expectation: FuzzExpectation
        switch method {
        case .getDeviceInformation:
            return make("read-only", method.rawValue, [], .answers(context.deviceInformation))
        case .getCurrentAccount, .getAccounts, .getSignInOptions:
            let clientId = rng.chance(20) ? rng.pick(context.knownClients) : poisonClientId(&rng)
            let known = context.knownClients.contains(clientId)
            let answer =
                switch method {
                case .getCurrentAccount: context.currentAccount
                case .getAccounts: context.accounts
                default: context.signInOptions
                }
            expectation =
                known ? .answers(answer) : .fails([Fuzz.broker("InvalidArgument"), Fuzz.broker("UnknownClient")])
            return make("hostile", method.rawValue, [.string(clientId)], expectation)
        case .signInWithPassword:
            let poisoned = poisonSet(&rng, count: 4)
            arguments = [
                .string(poisoned.contains(0) ? poisonClientId(&rng) : rng.pick(context.knownClients)),
                .string(poisoned.contains(1) ? poisonUsername(&rng) : someUsername(&rng)),
                .string(poisoned.contains(2) ? poisonPassword(&rng) : somePassword(&rng)),
                poisoned.contains(3) ? poisonScopes(&rng) : someScopes(&rng),
            ]
            errors = ["InvalidArgument", "UnknownClient", "InvalidUsername"]
        case .startSignIn:
            let poisoned = poisonSet(&rng, count: 3)
            arguments = [
                .string(poisoned.contains(0) ? poisonClientId(&rng) : rng.pick(context.knownClients)),
                .string(poisoned.contains(1) ? poisonUsername(&rng) : someUsername(&rng)),
                poisoned.contains(2) ? poisonScopes(&rng) : someScopes(&rng),
                randomOptions(&rng),
            ]
            errors = ["InvalidArgument", "UnknownClient", "InvalidUsername"]
        case .submitCode:
            // This connection never started a flow: every flowId is unknown to it.
            arguments = [.string(someFlowId(&rng)), .string(someCode(&rng))]
            errors = ["InvalidArgument", "InvalidCode", "FlowNotFound"]
        case .resendCode, .cancelSignIn, .finishSignIn:
            arguments = [.string(someFlowId(&rng))]
            errors = ["InvalidArgument", "FlowNotFound"]
        case .acquireTokenInteractive:
            let poisoned = poisonSet(&rng, count: 3)
            arguments = [
                .string(poisoned.contains(0) ? poisonClientId(&rng) : rng.pick(context.knownClients)),
                poisoned.contains(1) ? poisonScopes(&rng) : someScopes(&rng),
                poisoned.contains(2) ? poisonInteractiveOptions(&rng) : interactiveOptions(&rng),
            ]
            errors = ["InvalidArgument", "UnknownClient", "InvalidUsername"]
        case .acquireTokenSilent:
            let poisoned = poisonSet(&rng, count: 4)
            arguments = [
                .string(poisoned.contains(0) ? poisonClientId(&rng) : rng.pick(context.knownClients)),
                poisoned.contains(1) ? poisonScopes(&rng) : someScopes(&rng),
                .string(poisoned.contains(2) ? poisonAccountId(&rng) : someAccountId(&rng)),
                poisoned.contains(3) ? poisonBoolOption(&rng, "forceRefresh") : boolOption(&rng, "forceRefresh"),
            ]
            errors = ["InvalidArgument", "UnknownClient", "NoAccount"]
        case .signOut:
            let poisoned = poisonSet(&rng, count: 3)
            arguments = [
                .string(poisoned.contains(0) ? poisonClientId(&rng) : rng.pick(context.knownClients)),
                .string(poisoned.contains(1) ? poisonAccountId(&rng) : someAccountId(&rng)),
                poisoned.contains(2)
                    ? poisonBoolOption(&rng, "signoutFromBrowser") : boolOption(&rng, "signoutFromBrowser"),
            ]
            errors = ["InvalidArgument", "UnknownClient", "NoAccount"]
        }
        return make("hostile", method.rawValue, arguments, .fails(Set(errors.map(Fuzz.broker))))
    }

    /// Read-only calls with valid arguments: they must answer exactly what they answered before the run.
    private func readOnly(_ rng: inout SeededGenerator) -> FuzzCall {
        switch rng.int(0...3) {
        case 0:
            return make(
                "read-only", Broker1Method.getDeviceInformation.rawValue, [], .answers(context.deviceInformation))
        case 1:
            return make(
                "read-only", Broker1Method.getSignInOptions.rawValue, [.string(rng.pick(context.knownClients))],
                .answers(context.signInOptions))
        case 2:
            return make(
                "read-only", Broker1Method.getCurrentAccount.rawValue, [.string(rng.pick(context.knownClients))],
                .answers(context.currentAccount))
        default:
            return make(
                "read-only", Broker1Method.getAccounts.rawValue, [.string(rng.pick(context.knownClients))],
                .answers(context.accounts))
        }
    }

    // MARK: Wrong signatures

    /// A contract method (or a standard one) with arguments of the wrong types, count or nesting:
    /// the D-Bus layer must refuse it with InvalidArgs before the broker sees it.
    private func wrongSignature(_ rng: inout SeededGenerator) -> FuzzCall {
        var (interface, member, signature) = (Fuzz.interface, "", "")
        if rng.chance(20) {
            let method = rng.pick(Fuzz.standardMethods)
            (interface, member, signature) = (method.interface, method.name, method.signature)
        } else {
            let method = rng.pick(Fuzz.methods)
            (member, signature) = (method.name, method.signature)
        }
        var arguments: [DBusValue]
        if rng.chance(50), let right = rightlyTyped(signature, &rng) {
            arguments = nearMiss(right, &rng)
        } else {
            arguments = (0..<rng.int(0...5)).map { _ in
                rng.chance(50) ? contractTypedValue(&rng) : randomValue(depth: 0, &rng)
            }
        }
        if arguments.map(\.signature).joined() == signature { arguments.append(.bool(true)) }
        // libdbus answers org.freedesktop.DBus.Peer itself, in every connection, before any
        // object sees the call, and does not look at the arguments: Ping and GetMachineId answer.
        let expectation: FuzzExpectation = interface == Fuzz.peer ? .answers(nil) : .fails([Fuzz.invalidArgs])
        return FuzzCall(
            index: 0, kind: "wrong-signature", path: Fuzz.path, interface: interface, member: member,
            arguments: arguments, expectation: expectation)
    }

    /// Values of exactly `signature`'s types, from the contract's vocabulary.
    private func rightlyTyped(_ signature: String, _ rng: inout SeededGenerator) -> [DBusValue]? {
        guard let types = DBusSignature.completeTypes(signature) else { return nil }
        var values: [DBusValue] = []
        for type in types {
            switch type {
            case "s": values.append(.string(someString(&rng)))
            case "as": values.append(.strings((0..<rng.int(0...3)).map { _ in someString(&rng) }))
            case "a{sv}": values.append(randomOptions(&rng))
            case "v": values.append(.variant(randomValue(depth: 1, &rng)))
            default: return nil
            }
        }
        return values
    }

    /// `values` one mistake away from right: one missing, one too many, one of a neighbouring
    /// type, one wrapped in a variant, or two swapped.
    private func nearMiss(_ values: [DBusValue], _ rng: inout SeededGenerator) -> [DBusValue] {
        var result = values
        switch rng.int(0...4) {
        case 0 where !result.isEmpty: result.remove(at: rng.int(0...(result.count - 1)))
        case 1: result.insert(contractTypedValue(&rng), at: rng.int(0...result.count))
        case 2 where !result.isEmpty:
            let at = rng.int(0...(result.count - 1))
            result[at] = neighbour(of: result[at], &rng)
        case 3 where !result.isEmpty:
            let at = rng.int(0...(result.count - 1))
            result[at] = .variant(result[at])
        case 4 where result.count >= 2 && Set(result.map(\.signature)).count > 1:
            result.swapAt(0, result.count - 1)
            if result.map(\.signature) == values.map(\.signature) { result.append(.uint32(7)) }
        default: result.append(.int64(-1))
        }
        return result
    }

    /// A value of a type a careless caller might confuse with `value`'s.
    private func neighbour(of value: DBusValue, _ rng: inout SeededGenerator) -> DBusValue {
        switch value {
        case .string(let s):
            return rng.pick([
                .objectPath("/" + s.filter { $0.isLetter && $0.isASCII }), .signature("s"), .strings([s]),
                .variant(.string(s)), .byte(0), .bool(!s.isEmpty), .uint32(UInt32(s.utf8.count)),
            ])
        case .array:
            return rng.pick([
                .stringDict(["a": "b"]), .string("User.Read"), .vardictArray([[:]]),
                .array(elementSignature: "v", [.variant(.string("User.Read"))]), .array(elementSignature: "ay", []),
            ])
        case .dictionary:
            return rng.pick([
                .stringDict(["forceRefresh": "true"]), .vardictArray([["forceRefresh": .bool(true)]]),
                .dictionary(
                    keySignature: "s", valueSignature: "b",
                    [DBusDictEntry(key: .string("forceRefresh"), value: .bool(true))]),
                .dictionary(keySignature: "u", valueSignature: "v", []), .strings(["forceRefresh"]),
            ])
        default:
            return .string("x")
        }
    }

    /// One value of a type the contract uses somewhere, with hostile contents.
    private func contractTypedValue(_ rng: inout SeededGenerator) -> DBusValue {
        switch rng.int(0...8) {
        case 0: return .string(someString(&rng))
        case 1: return .bool(rng.chance(50))
        case 2: return .uint32(rng.pick([0, 1, 8, UInt32.max, UInt32(rng.int(0...1_000_000))]))
        case 3: return .int64(rng.pick([0, -1, Int64.min, Int64.max, Int64(rng.int(-1_000_000...1_000_000))]))
        case 4: return .strings((0..<rng.int(0...4)).map { _ in someString(&rng) })
        case 5: return randomOptions(&rng)
        case 6:
            return .stringDict(
                Dictionary(
                    (0..<rng.int(0...3)).map { _ in (someString(&rng), someString(&rng)) },
                    uniquingKeysWith: { a, _ in a }))
        case 7: return .vardictArray((0..<rng.int(0...2)).map { _ in randomOptions(&rng).vardict ?? [:] })
        default: return .variant(randomValue(depth: 1, &rng))
        }
    }

    // MARK: Properties, Introspectable, Peer, unknown targets

    private func propertiesCall(_ rng: inout SeededGenerator) -> FuzzCall {
        let interfaceName = rng.pick([
            Fuzz.interface, Fuzz.interface, "", Fuzz.properties, Fuzz.introspectable, Fuzz.peer,
            "io.shareddevice.Broker2", someString(&rng),
        ])
        let name = rng.chance(70) ? rng.pick(Fuzz.propertyNames) : someString(&rng)
        let own = interfaceName == Fuzz.interface || interfaceName.isEmpty
        let standard = [Fuzz.properties, Fuzz.introspectable, Fuzz.peer].contains(interfaceName)
        let unknown: Set<String> = [Fuzz.bus("UnknownInterface"), Fuzz.bus("UnknownProperty")]
        switch rng.int(0...2) {
        case 0:
            var answer: [DBusValue]? = nil
            if own, Fuzz.propertyNames.contains(name), let all = context.allProperties.first?.vardict,
                let value = all[name]
            {
                answer = [.variant(value)]
            }
            let expectation: FuzzExpectation = answer != nil ? .answers(answer) : .fails(unknown)
            return FuzzCall(
                index: 0, kind: "properties", path: Fuzz.path, interface: Fuzz.properties, member: "Get",
                arguments: [.string(interfaceName), .string(name)], expectation: expectation)
        case 1:
            let expectation: FuzzExpectation =
                own
                ? .answers(context.allProperties)
                : standard ? .answers([.vardict([:])]) : .fails([Fuzz.bus("UnknownInterface")])
            return FuzzCall(
                index: 0, kind: "properties", path: Fuzz.path, interface: Fuzz.properties, member: "GetAll",
                arguments: [.string(interfaceName)], expectation: expectation)
        default:
            // Every property is read-only: Set never succeeds, whatever the value.
            let value: DBusValue =
                rng.chance(50)
                ? .variant(.string(rng.pick(["default", "shared", someString(&rng)])))
                : .variant(randomValue(depth: 1, &rng))
            return FuzzCall(
                index: 0, kind: "properties", path: Fuzz.path, interface: Fuzz.properties, member: "Set",
                arguments: [.string(interfaceName), .string(name), value],
                expectation: .fails(unknown.union([Fuzz.bus("PropertyReadOnly"), Fuzz.invalidArgs])))
        }
    }

    private func introspectOrPeer(_ rng: inout SeededGenerator) -> FuzzCall {
        let path = rng.pick(Fuzz.paths)
        switch rng.int(0...2) {
        case 0:
            let known = context.introspection[path]
            let expectation: FuzzExpectation
            switch known {
            case .success(let answer)?: expectation = .answers(answer)
            case .failure(let error)?: expectation = .fails([error.name])
            case nil: expectation = .answers(nil, orFails: [Fuzz.bus("UnknownObject")])
            }
            return FuzzCall(
                index: 0, kind: "introspect", path: path, interface: Fuzz.introspectable, member: "Introspect",
                arguments: [], expectation: expectation)
        case 1:
            return FuzzCall(
                index: 0, kind: "peer", path: path, interface: Fuzz.peer, member: "Ping", arguments: [],
                expectation: .answers([]))
        default:
            return FuzzCall(
                index: 0, kind: "peer", path: path, interface: Fuzz.peer, member: "GetMachineId", arguments: [],
                expectation: .answers(nil))
        }
    }

    /// Members, interfaces and objects that do not exist.
    private func unknownTarget(_ rng: inout SeededGenerator) -> FuzzCall {
        let arguments = (0..<rng.int(0...2)).map { _ in contractTypedValue(&rng) }
        let member = rng.pick(["NoSuchMethod", "getCurrentAccount", "SignOutEverywhere", "Get", "Introspect", "X"])
        switch rng.int(0...2) {
        case 0:
            return FuzzCall(
                index: 0, kind: "unknown", path: Fuzz.path, interface: Fuzz.interface, member: member,
                arguments: arguments, expectation: .fails([Fuzz.bus("UnknownMethod")]))
        case 1:
            return FuzzCall(
                index: 0, kind: "unknown", path: Fuzz.path,
                interface: rng.pick(["io.shareddevice.Broker2", "org.example.Nothing", "io.shareddevice.Broker1.Error"]
                ),
                member: rng.pick(Fuzz.methods).name, arguments: arguments,
                expectation: .fails([Fuzz.bus("UnknownInterface")]))
        default:
            let path = rng.pick(["/io/shareddevice/Broker2", "/", "/io/shareddevice/Broker1/x", "/nothing/here"])
            let method = rng.pick(Fuzz.methods)
            return FuzzCall(
                index: 0, kind: "unknown", path: path, interface: Fuzz.interface, member: method.name,
                arguments: arguments, expectation: .fails([Fuzz.bus("UnknownObject")]))
        }
    }

    private func make(_ kind: String, _ member: String, _ arguments: [DBusValue], _ expectation: FuzzExpectation)
        -> FuzzCall
    {
        FuzzCall(
            index: 0, kind: kind, path: Fuzz.path, interface: Fuzz.interface, member: member,
            arguments: arguments, expectation: expectation)
    }

    // MARK: Argument values

    /// Which of `count` arguments get a value the rules refuse: at least one.
    private func poisonSet(_ rng: inout SeededGenerator, count: Int) -> Set<Int> {
        var set: Set<Int> = [rng.int(0...(count - 1))]
        for index in 0..<count where rng.chance(20) { set.insert(index) }
        return set
    }

    /// A clientId the broker must refuse: malformed (InvalidArgument) or well-formed but not
    /// among the configured clients (UnknownClient), often right at the 256-byte limit.
    private func poisonClientId(_ rng: inout SeededGenerator) -> String {
        while true {
            let candidate: String
            switch rng.int(0...5) {
            case 0: candidate = "app-" + asciiWord(&rng, 1...20)
            case 1:
                candidate = rng.pick([
                    "mail-app" + "x", "Mail-app", "mail-app ", " mail-app", "mail_app", "calendar-app\t",
                ])
            case 2:
                candidate = String(
                    repeating: rng.pick(["a", "é", "-"]),
                    count: rng.pick([Fuzz.maxIdentifier, Fuzz.maxIdentifier + 1, 128]))
            default: candidate = someString(&rng)
            }
            if !context.knownClients.contains(candidate) { return candidate }
        }
    }

    private func poisonUsername(_ rng: inout SeededGenerator) -> String {
        switch rng.int(0...4) {
        case 0: return ""
        case 1: return sized(Fuzz.maxUsername + rng.pick([1, 2, 100, 60_000]), &rng)
        case 2:
            return rng.pick([
                "two words", "alice@contoso.example ", "\u{7}bell", "tab\there", "new\nline", "\u{85}next", " ",
            ])
        default: return someUsername(&rng) + rng.pick([" ", "\u{1}", "\n", "\u{9F}", "\u{1B}"])
        }
    }

    private func someUsername(_ rng: inout SeededGenerator) -> String {
        switch rng.int(0...4) {
        case 0...1: return rng.pick(context.usernames)
        case 2: return asciiWord(&rng, 1...30) + "@" + asciiWord(&rng, 1...10) + ".example"
        case 3: return sized(rng.pick([Fuzz.maxUsername, Fuzz.maxUsername - 1, 1]), &rng)
        default: return someString(&rng)
        }
    }

    private func poisonPassword(_ rng: inout SeededGenerator) -> String {
        rng.chance(50) ? "" : sized(Fuzz.maxPassword + rng.pick([1, 3, 1000, 100_000]), &rng)
    }

    private func somePassword(_ rng: inout SeededGenerator) -> String {
        switch rng.int(0...3) {
        case 0: return context.password
        case 1: return sized(rng.pick([1, Fuzz.maxPassword, Fuzz.maxPassword - 1]), &rng)
        default: return someString(&rng)
        }
    }

    /// Too many scopes, or one the rules refuse among valid ones.
    private func poisonScopes(_ rng: inout SeededGenerator) -> DBusValue {
        if rng.chance(30) {
            let count = rng.pick([Fuzz.maxScopes + 1, Fuzz.maxScopes + 2, 500, 5000])
            return .strings((0..<count).map { "scope.\($0)" })
        }
        var scopes = (0..<rng.int(0...4)).map { _ in validScope(&rng) }
        let bad = rng.pick([
            "", "two words", "quote\"d", "back\\slash", "é", "\u{1}", "tab\t",
            String(repeating: "s", count: Fuzz.maxScope + 1),
            String(repeating: "é", count: Fuzz.maxScope / 2 + 1), "User.Read ", "\u{7F}",
        ])
        scopes.insert(bad, at: rng.int(0...scopes.count))
        return .strings(scopes)
    }

    private func someScopes(_ rng: inout SeededGenerator) -> DBusValue {
        if rng.chance(10) {
            return .strings(
                (0..<Fuzz.maxScopes).map { String(repeating: "s", count: Fuzz.maxScope - 4) + "\($0 + 1000)" })
        }
        if rng.chance(20) { return .strings((0..<rng.int(0...3)).map { _ in someString(&rng) }) }
        return .strings((0..<rng.int(0...4)).map { _ in validScope(&rng) })
    }

    private func validScope(_ rng: inout SeededGenerator) -> String {
        rng.chance(50)
            ? rng.pick(["User.Read", "openid", "profile", "offline_access", "email", "Mail.Send", "api://x/.default"])
            : asciiWord(&rng, 1...40)
    }

    private func poisonAccountId(_ rng: inout SeededGenerator) -> String {
        while true {
            let candidate: String
            switch rng.int(0...3) {
            case 0:
                candidate = rng.pick([
                    "someone-else", context.accountId + "x", context.accountId.uppercased(), "oid.tid",
                ])
            case 1: candidate = String(repeating: "i", count: rng.pick([Fuzz.maxIdentifier, Fuzz.maxIdentifier + 1]))
            default: candidate = someString(&rng)
            }
            if !candidate.isEmpty && candidate != context.accountId { return candidate }
        }
    }

    private func someAccountId(_ rng: inout SeededGenerator) -> String {
        rng.chance(50) ? "" : rng.chance(70) ? context.accountId : someString(&rng)
    }

    /// A flowId: none exists for this caller, so whatever it is the broker knows no such flow.
    private func someFlowId(_ rng: inout SeededGenerator) -> String {
        switch rng.int(0...3) {
        case 0:
            return UUID(
                uuid: (
                    UInt8(rng.int(0...255)), 1, 2, 3, 4, 5, 0x46, 7, 0x88, 9, 10, 11, 12, 13, 14,
                    UInt8(rng.int(0...255))
                )
            ).uuidString.lowercased()
        case 1: return String(repeating: "f", count: rng.pick([Fuzz.maxIdentifier, Fuzz.maxIdentifier + 1, 10_000]))
        default: return someString(&rng)
        }
    }

    private func someCode(_ rng: inout SeededGenerator) -> String {
        switch rng.int(0...3) {
        case 0:
            return String(String(rng.int(0...99_999_999)).reversed()).padding(toLength: 8, withPad: "0", startingAt: 0)
        case 1:
            return rng.pick(["", String(repeating: "1", count: 64), String(repeating: "1", count: 65), "12 34", "１２３"])
        default: return someString(&rng)
        }
    }

    /// An `a{sv}` with unknown keys and values of any type.
    private func randomOptions(_ rng: inout SeededGenerator) -> DBusValue {
        var entries: [String: DBusValue] = [:]
        for _ in 0..<rng.int(0...3) {
            entries[
                rng.chance(50)
                    ? rng.pick(["forceRefresh", "signoutFromBrowser", "prompt", "loginHint", "flowId", "x"])
                    : someString(&rng)] =
                randomValue(depth: 1, &rng)
        }
        // vardict wraps each value in a variant; a variant of a variant is legal too.
        return .vardict(entries)
    }

    /// Options with `key` as a boolean (or absent) and harmless extras.
    private func boolOption(_ rng: inout SeededGenerator, _ key: String) -> DBusValue {
        var entries: [String: DBusValue] = [:]
        if rng.chance(50) { entries[key] = rng.chance(20) ? .variant(.bool(rng.chance(50))) : .bool(rng.chance(50)) }
        if rng.chance(30) { entries[asciiWord(&rng, 1...10)] = randomValue(depth: 1, &rng) }
        return .vardict(entries)
    }

    /// Options with `key` of a type other than boolean.
    private func poisonBoolOption(_ rng: inout SeededGenerator, _ key: String) -> DBusValue {
        var entries: [String: DBusValue] = [
            key: rng.pick([
                .string("true"), .uint32(1), .int64(1), .byte(1), .strings(["true"]),
                .vardict(["b": .bool(true)]), .variant(.string("yes")), .double(1),
            ])
        ]
        if rng.chance(30) { entries["x"] = .bool(true) }
        return .vardict(entries)
    }

    private func interactiveOptions(_ rng: inout SeededGenerator) -> DBusValue {
        var entries: [String: DBusValue] = [:]
        if rng.chance(50) { entries["prompt"] = .string(rng.pick(["select_account", "login", "consent", "none", ""])) }
        if rng.chance(30) { entries["loginHint"] = .string(rng.pick(context.usernames + [""])) }
        if rng.chance(30) { entries["flowId"] = .string(rng.chance(50) ? "" : "flow-" + asciiWord(&rng, 1...20)) }
        return .vardict(entries)
    }

    /// Interactive options one of which the broker refuses: a prompt outside the four, or a
    /// prompt, loginHint or flowId that is not a string or breaks the rules.
    private func poisonInteractiveOptions(_ rng: inout SeededGenerator) -> DBusValue {
        guard case .dictionary(_, _, var entries) = interactiveOptions(&rng) else { return .vardict([:]) }
        let (key, value): (String, DBusValue) =
            switch rng.int(0...5) {
            case 0:
                (
                    "prompt",
                    .string(rng.pick(["LOGIN", "select-account", "none ", "always", "\u{1}", sized(300, &rng)]))
                )
            case 1: ("prompt", rng.pick([.bool(true), .uint32(1), .strings(["login"])]))
            case 2: ("loginHint", rng.pick([.bool(false), .int64(0), .strings(["alice@contoso.example"])]))
            case 3: ("loginHint", .string(rng.pick(["two words", "\u{1}", sized(Fuzz.maxUsername + 1, &rng)])))
            case 4: ("flowId", rng.pick([.uint32(3), .vardict([:]), .bool(true)]))
            default: ("flowId", .string(rng.pick(["has space", "é", sized(Fuzz.maxIdentifier + 1, &rng), "\u{7F}"])))
            }
        entries.removeAll { $0.key == .string(key) }
        entries.append(DBusDictEntry(key: .string(key), value: .variant(value)))
        return .dictionary(keySignature: "s", valueSignature: "v", entries)
    }

    // MARK: Strings

    /// Strings a careless or hostile caller sends: empty, blank, control characters, bidi
    /// overrides, noncharacters (which libdbus accepts as valid UTF-8), combining marks, emoji,
    /// shell and path tricks, names of the bus itself, and lengths on either side of each limit.
    static let oddStrings: [String] =
        [
            "", " ", "  ", "\t", "\n", "\r\n", "\u{1}", "\u{1B}[31m", "\u{7F}", "\u{85}", "\u{A0}", "\u{AD}",
            "\u{200B}", "\u{200D}",
            "\u{2028}", "\u{202E}ppa-liam", "\u{FEFF}mail-app", "\u{10FFFF}",
            "\u{1F600}", "e\u{301}", "\u{301}", "ñ", "日本語", "🏳️‍🌈", "Ａ", "ǅ", "İ", "ß",
            "'", "\"", "\\", "%s%n%x", "../../etc/passwd", "$(id)", "`id`", "; true", "<script>", "{}", "[]", "null",
            "-1", "0",
            "NaN", "1e309", "mail-app\u{200B}", "io.shareddevice.Broker1", "/io/shareddevice/Broker1", ":1.1",
            "org.freedesktop.DBus", "alice@contoso.example", "ALICE@CONTOSO.EXAMPLE", "bob@contoso.example",
            "carol@contoso.example", "nobody@contoso.example", "User.Read", "openid", "offline_access",
            // Noncharacters, which Swift literals refuse.
        ] + [0xFFFE, 0xFFFF, 0xFDD0, 0xFDEF, 0x1FFFE].map { String(Unicode.Scalar($0)!) }

    func someString(_ rng: inout SeededGenerator, huge: Bool = true) -> String {
        switch rng.int(0...(huge ? 99 : 96)) {
        case 0..<35: return rng.pick(Self.oddStrings)
        case 35..<55: return printable(&rng, 1...40)
        case 55..<70: return unicode(&rng, 1...20)
        case 70..<87: return sized(rng.pick([255, 256, 257, 1024, 4095, 4096, 4097, 8192]), &rng)
        case 87..<97: return rng.pick(context.knownClients + context.usernames + [context.accountId])
        case 97..<99: return sized(rng.pick([65_536, 200_000]), &rng)
        default: return sized(1 << 20, &rng)
        }
    }

    /// A string of exactly `bytes` bytes of UTF-8, in ASCII or in two-byte characters (with one
    /// ASCII filler when odd), so that byte and character counts disagree.
    private func sized(_ bytes: Int, _ rng: inout SeededGenerator) -> String {
        if rng.chance(30) {
            return String(repeating: "é", count: bytes / 2) + (bytes % 2 == 1 ? "x" : "")
        }
        let letter = rng.pick(["x", "A", "7", "-"])
        return String(repeating: letter, count: bytes)
    }

    private func asciiWord(_ rng: inout SeededGenerator, _ length: ClosedRange<Int>) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789-._")
        return String((0..<rng.int(length)).map { _ in rng.pick(alphabet) })
    }

    private func printable(_ rng: inout SeededGenerator, _ length: ClosedRange<Int>) -> String {
        String((0..<rng.int(length)).map { _ in Character(Unicode.Scalar(UInt8(rng.int(0x20...0x7E)))) })
    }

    /// Any scalars except NUL (which a D-Bus string cannot hold) and surrogates (which UTF-8 cannot).
    private func unicode(_ rng: inout SeededGenerator, _ length: ClosedRange<Int>) -> String {
        var scalars = String.UnicodeScalarView()
        for _ in 0..<rng.int(length) {
            let value: UInt32 =
                switch rng.int(0...3) {
                case 0: UInt32(rng.int(1...0x7F))
                case 1: UInt32(rng.int(0x80...0x7FF))
                case 2: UInt32(rng.int(0x800...0xFFFF))
                default: UInt32(rng.int(0x10000...0x10FFFF))
                }
            scalars.append(Unicode.Scalar(value) ?? "\u{FFFD}")
        }
        return String(scalars)
    }

    // MARK: Random value trees

    /// A value of a random type, nested a few levels at most (well within D-Bus's limits).
    func randomValue(depth: Int, _ rng: inout SeededGenerator) -> DBusValue {
        value(of: randomType(depth: depth, &rng), &rng)
    }

    private func randomType(depth: Int, _ rng: inout SeededGenerator) -> String {
        let basics = ["y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g"]
        if depth >= 3 || rng.chance(55) { return rng.chance(40) ? "s" : rng.pick(basics) }
        switch rng.int(0...4) {
        case 0: return "a" + randomType(depth: depth + 1, &rng)
        case 1: return "a{" + rng.pick(["s", "s", "u", "o", "y", "x"]) + randomType(depth: depth + 1, &rng) + "}"
        case 2: return "(" + (0..<rng.int(1...3)).map { _ in randomType(depth: depth + 1, &rng) }.joined() + ")"
        case 3: return rng.pick(["as", "a{sv}", "a{ss}", "aa{sv}", "av", "ay"])
        default: return "v"
        }
    }

    private func value(of signature: String, _ rng: inout SeededGenerator) -> DBusValue {
        let first = signature.first!
        switch first {
        case "y": return .byte(UInt8(rng.int(0...255)))
        case "b": return .bool(rng.chance(50))
        case "n": return .int16(rng.pick([0, -1, Int16.min, Int16.max]))
        case "q": return .uint16(rng.pick([0, 1, UInt16.max]))
        case "i": return .int32(rng.pick([0, -1, Int32.min, Int32.max, 42]))
        case "u": return .uint32(rng.pick([0, 1, UInt32.max, 8]))
        case "x": return .int64(rng.pick([0, -1, Int64.min, Int64.max]))
        case "t": return .uint64(rng.pick([0, 1, UInt64.max]))
        case "d":
            return .double(
                rng.pick([0, -0.0, 1.5, .infinity, -.infinity, .nan, .greatestFiniteMagnitude, .leastNonzeroMagnitude]))
        case "s": return .string(someString(&rng, huge: false))
        case "o": return .objectPath(rng.pick(["/", "/io/shareddevice/Broker1", "/a/b_c/D9", "/org/freedesktop/DBus"]))
        case "g": return .signature(rng.pick(["", "s", "a{sv}", "(ii)", "aa{sv}", "v", "sasa{sv}"]))
        case "v": return .variant(randomValue(depth: 2, &rng))
        case "(":
            let inner = String(signature.dropFirst().dropLast())
            return .structure((DBusSignature.completeTypes(inner) ?? ["s"]).map { value(of: $0, &rng) })
        default:  // "a"
            let element = String(signature.dropFirst())
            if element.hasPrefix("{") {
                let pair = DBusSignature.completeTypes(String(element.dropFirst().dropLast())) ?? ["s", "v"]
                var seen = Set<DBusValue>()
                var entries: [DBusDictEntry] = []
                for _ in 0..<rng.int(0...3) {
                    let key = value(of: pair[0], &rng)
                    if seen.insert(key).inserted {
                        entries.append(DBusDictEntry(key: key, value: value(of: pair[1], &rng)))
                    }
                }
                return .dictionary(keySignature: pair[0], valueSignature: pair[1], entries)
            }
            // Now and then a long array, of a basic type only, so sizes stay bounded.
            let count = element.count == 1 && rng.chance(5) ? 200 : rng.int(0...3)
            return .array(elementSignature: element, (0..<count).map { _ in value(of: element, &rng) })
        }
    }
}

// MARK: - Figures

/// What a run saw: replies per name, latency, and every broken expectation.
struct FuzzFigures: Sendable {
    var calls = 0
    var byReply: [String: Int] = [:]
    var byKind: [String: Int] = [:]
    var latencies: [Duration] = []
    var slowest: (Duration, String) = (.zero, "")
    var problems: [String] = []

    mutating func record(_ call: FuzzCall, _ outcome: Result<[DBusValue], DBusError>, _ latency: Duration) {
        calls += 1
        byKind[call.kind, default: 0] += 1
        switch outcome {
        case .success: byReply["(answer)", default: 0] += 1
        case .failure(let error): byReply[error.name, default: 0] += 1
        }
        latencies.append(latency)
        if latency > slowest.0 { slowest = (latency, call.description) }
        if let problem = call.expectation.problem(with: outcome) { problems.append("\(call.description): \(problem)") }
        if let problem = Self.outsideContract(call, outcome) { problems.append("\(call.description): \(problem)") }
    }

    /// The contract lists the errors each method may reply (`io.shareddevice.Contract.Errors`,
    /// and docs/dbus-api.md from it): a broker error outside that list breaks what apps were told.
    static func outsideContract(_ call: FuzzCall, _ outcome: Result<[DBusValue], DBusError>) -> String? {
        guard case .failure(let error) = outcome, call.path == Fuzz.path,
            call.interface == Fuzz.interface || call.interface.isEmpty,
            let method = Broker1Method(rawValue: call.member), let code = BrokerErrorCode(dbusErrorName: error.name),
            !method.errors.contains(code)
        else { return nil }
        return "got \(code.rawValue), which the contract does not list for \(method.rawValue) ("
            + "\(method.errors.map(\.rawValue).joined(separator: " ")))"
    }

    func percentile(_ p: Double) -> Duration {
        guard !latencies.isEmpty else { return .zero }
        let sorted = latencies.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    func report(seed: UInt64, elapsed: Duration) -> String {
        var lines = [
            "bus fuzz: seed \(seed) (BUS_FUZZ_SEED=\(seed) repeats this run), \(calls) calls in \(ms(elapsed)) "
                + "(\(Int(Double(calls) / max(elapsed.seconds, 0.001))) calls/s)"
        ]
        lines.append(
            "bus fuzz: latency p50 \(ms(percentile(0.5))), p99 \(ms(percentile(0.99))), max \(ms(slowest.0)): "
                + "\(slowest.1.prefix(200))"
        )
        lines.append(
            "bus fuzz: calls by kind: "
                + byKind.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        lines.append("bus fuzz: replies by name:")
        for (name, count) in byReply.sorted(by: { $0.value > $1.value }) {
            lines.append("    \(String(count).padding(toLength: 6, withPad: " ", startingAt: 0)) \(name)")
        }
        return lines.joined(separator: "\n")
    }

    private func ms(_ d: Duration) -> String { String(format: "%.1f ms", d.seconds * 1000) }
}
