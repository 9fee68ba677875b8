import Foundation

actor NativeAuthStore {
    let codeLifetime: TimeInterval
    init(codeLifetime: TimeInterval) { self.codeLifetime = codeLifetime }
}
