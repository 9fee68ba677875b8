import BrokerCore
import DBus

/// What callers send in `a{sv}` options, checked against the contract, and the broker's
/// refusals as D-Bus errors.
enum BusMarshalling {
    // The dictionaries brokerd sends are generated from the contract (Broker1DictionaryEncoding.swift,
    // `busValue`); what is left here is what callers send: options, and the errors replied.

    /// Refuses a call whose options (`a{sv}`) hold a key the contract does not list for its method
    /// (`io.shareddevice.Contract.Options`), or a listed key with a value of another type, as the
    /// configuration file refuses an unknown key: a misspelt `forcerefresh` ignored would leave the
    /// caller believing it was obeyed. Names the key and the ones the method knows; nothing changed.
    static func checkOptions(_ method: Broker1Method, _ arguments: [DBusValue]) throws(BrokerFailure) {
        guard let index = method.optionsArgument, arguments.indices.contains(index),
            let options = arguments[index].vardict
        else { return }
        let known = method.options
        // The first in order, so that the same call always gets the same message.
        for key in options.keys.sorted() {
            guard let signature = known.first(where: { $0.key == key })?.signature else {
                let names = known.map { "\($0.key) (\($0.signature))" }
                throw BrokerFailure(
                    .invalidArgument,
                    "\(method.rawValue) has no option \"\(OutsideText.escaped(key))\"; "
                        + (names.isEmpty
                            ? "it takes none: pass an empty dictionary"
                            : "its options are \(names.joined(separator: ", "))"))
            }
            if let value = options[key], value.signature != signature {
                throw BrokerFailure(
                    .invalidArgument,
                    "option \(key) of \(method.rawValue) must be of type \(signature), not \(value.signature)")
            }
        }
    }

    /// A boolean option: absent is false, any other type is the caller's mistake.
    static func boolOption(_ options: [String: DBusValue], _ key: String) throws(BrokerFailure) -> Bool {
        guard let value = options[key] else { return false }
        guard let flag = value.bool else {
            throw BrokerFailure(.invalidArgument, "option \(key) must be a boolean (b), not \(value.signature)")
        }
        return flag
    }

    /// A string option: absent is nil, any other type is the caller's mistake.
    static func stringOption(_ options: [String: DBusValue], _ key: String) throws(BrokerFailure) -> String? {
        guard let value = options[key] else { return nil }
        guard let text = value.string else {
            throw BrokerFailure(.invalidArgument, "option \(key) must be a string (s), not \(value.signature)")
        }
        return text
    }

    static func promptOption(_ options: [String: DBusValue]) throws(BrokerFailure) -> Prompt? {
        guard let text = try stringOption(options, OptionKey.prompt), !text.isEmpty else { return nil }
        guard let prompt = Prompt(rawValue: text) else {
            throw BrokerFailure(
                .invalidArgument,
                "option prompt must be one of \(Prompt.allCases.map(\.rawValue).joined(separator: ", ")), not "
                    + OutsideText.escaped(text))
        }
        return prompt
    }

    static func error(_ failure: BrokerFailure) -> DBusError {
        // An error reply libdbus refused would leave the caller waiting for its timeout.
        DBusError(name: failure.code.dbusErrorName, message: OutsideText.cleaned(failure.message))
    }
}
