// brokerd's configuration files (DaemonConfigurationFile.parse: JSON's StrictJSON, the Decodable types,
// then the rules of clients), on any bytes, as a file only its owner reads (0600) and as one
// others read (0644). A file someone else can write is refused before it is read (tests cover
// that); what is left to a parser is the text of the user's or the administrator's own file. An
// accepted file must be as strict as its rules say: every string free of control characters,
// each clientId one an app can send and listed once, every bound program and secret file an
// absolute path, a secret method only with a secret, an inline secret only in a private file;
// a refused one gets a message that names the file and prints no control character.
import BrokerCore
import JSON

@testable import BrokerDaemon
@testable import BrokerPersistence

private let path = "/etc/shared-device-broker/broker.conf"

func fuzzOne(_ bytes: [UInt8]) {
    var accepted = false
    for permissions: UInt32 in [0o600, 0o644] {
        do {
            let file = try DaemonConfigurationFile.parse(bytes, path: path, permissions: permissions)
            accepted = true
            check(file, permissions: permissions)
        } catch {
            let message = error.description
            if !message.hasPrefix("the configuration file \(path)") {
                violated("a refusal that names no file: \(message)")
            }
            if message.unicodeScalars.contains(where: isControl) { violated("a refusal prints a control character") }
        }
    }
    // The configuration's rules are the request's and more.
    if accepted, (try? StrictJSON.check(bytes, rules: .request)) == nil {
        violated("a configuration accepted that a request would refuse")
    }
}

private func isControl(_ scalar: Unicode.Scalar) -> Bool { scalar.properties.generalCategory == .control }

private func check(_ file: DaemonConfigurationFile, permissions: UInt32) {
    var strings = [file.authority, file.tenantId].compactMap { $0 }
    var seen = Set<String>()
    for client in file.clients ?? [] {
        if (try? InputRules.clientId(client.clientId)) == nil { violated("a clientId no app can send: accepted") }
        if !seen.insert(client.clientId).inserted { violated("a clientId listed twice: accepted") }
        if let executables = client.allowedExecutables {
            if executables.isEmpty { violated("an empty allowedExecutables: accepted") }
            if executables.contains(where: { !$0.hasPrefix("/") }) { violated("a relative program: accepted") }
            strings += executables
        }
        if let secretFile = client.clientSecretFile, !secretFile.hasPrefix("/") {
            violated("a relative clientSecretFile: accepted")
        }
        if client.clientSecret != nil, permissions & 0o077 != 0 { violated("an inline secret others read: accepted") }
        do throws(DaemonConfigurationFile.Client.SecretProblem) {
            _ = try client.secretMethod()
        } catch {
            violated("a secret method that cannot work: accepted")
        }
        strings += [client.clientId, client.name, client.clientSecret, client.clientSecretFile].compactMap { $0 }
    }
    if strings.contains(where: { $0.unicodeScalars.contains(where: isControl) }) {
        violated("a control character in an accepted string")
    }
    _ = file.allowedExecutables()
    _ = file.overridden(by: file)
}
