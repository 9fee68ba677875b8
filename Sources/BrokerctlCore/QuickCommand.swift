/// The commands apps and scripts run most, read without ArgumentParser when their arguments are
/// of the plainest form: `device-info`, `current-account` and `accounts` with `--client-id`,
/// `--address` and `--json`, each at most once. `brokerctl` runs these itself, as soon as it
/// starts, like `dbus-send`: it links neither ArgumentParser (which reads a command by reflecting
/// on its declaration) nor Foundation, whose pointers the dynamic loader would write at every
/// start.
///
/// Anything else (help, completions, a misspelt or repeated option, a value that looks like an
/// option) goes to `brokerctl-commands`, whose ArgumentParser is the one parser of brokerctl's
/// grammar, with its messages: this only recognises what ArgumentParser would read the same way,
/// and runs the same code (``PlainReads``).
public enum QuickCommand {
    case deviceInfo(address: String?, json: Bool)
    case currentAccount(clientId: String, address: String?, json: Bool)
    case accounts(clientId: String, address: String?, json: Bool)

    /// The command `arguments` (without the program's name) name, when they are of the plain form.
    public static func recognize(_ arguments: [String]) -> QuickCommand? {
        guard let command = arguments.first, ["device-info", "current-account", "accounts"].contains(command) else {
            return nil
        }
        var address: String?
        var clientId: String?
        var json = false
        var rest = arguments.dropFirst()[...]
        while let argument = rest.popFirst() {
            if argument == "--json" {
                guard !json else { return nil }
                json = true
                continue
            }
            let (name, inline) = Self.split(argument)
            guard let value = inline ?? rest.popFirst(), !value.hasPrefix("-") else { return nil }
            switch name {
            case "--address" where address == nil: address = value
            case "--client-id" where clientId == nil: clientId = value
            default: return nil
            }
        }
        switch (command, clientId) {
        case ("device-info", nil): return .deviceInfo(address: address, json: json)
        case ("current-account", let clientId?):
            return .currentAccount(clientId: clientId, address: address, json: json)
        case ("accounts", let clientId?): return .accounts(clientId: clientId, address: address, json: json)
        default: return nil
        }
    }

    /// `--name=value` as its two parts; `--name` alone with no value.
    private static func split(_ argument: String) -> (String, String?) {
        guard let equals = argument.firstIndex(of: "=") else { return (argument, nil) }
        return (String(argument[..<equals]), String(argument[argument.index(after: equals)...]))
    }

    /// Runs the command; the exit status.
    public func run() -> Int32 {
        switch self {
        case .deviceInfo(let address, let json): PlainReads.deviceInformation(address: address, json: json)
        case .currentAccount(let clientId, let address, let json):
            PlainReads.currentAccount(clientId: clientId, address: address, json: json)
        case .accounts(let clientId, let address, let json):
            PlainReads.accounts(clientId: clientId, address: address, json: json)
        }
    }
}
