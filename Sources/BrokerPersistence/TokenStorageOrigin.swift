/// Where the token storage was chosen. Advice to choose another names the setting a person
/// actually changes: a flag is ignored where the administrator's file sets the storage, so
/// telling an administrator to pass one sends them round in a circle.
public enum TokenStorageOrigin: Sendable, Equatable {
    /// Nothing chose it: the default, `secret-service`.
    case builtIn
    /// `--token-storage`.
    case flag
    /// `tokenStorage` in this configuration file.
    case file(String)

    /// The setting as a person finds it: `--token-storage memory`, `tokenStorage "memory" in FILE`.
    public func naming(_ storage: TokenStorage) -> String {
        switch self {
        case .builtIn: "\(storage.rawValue), the default"
        case .flag: "--token-storage \(storage.rawValue)"
        case .file(let path): "tokenStorage \"\(storage.rawValue)\" in \(path)"
        }
    }

    /// How to keep tokens elsewhere when the Secret Service cannot be used, worded to follow "or".
    public var alternatives: String {
        let memory = "(tokens are lost when it stops)"
        let plaintext = "(tokens in the state file, readable by anything running as you)"
        switch self {
        case .builtIn, .flag:
            return
                "or start brokerd with --token-storage memory \(memory) or --token-storage plaintext-file \(plaintext)"
        case .file(let path):
            return "or change tokenStorage in \(path) to \"memory\" \(memory) or \"plaintext-file\" \(plaintext)"
        }
    }
}
