import Foundation

actor AuthorizationStore {
    let codeLifetime: TimeInterval
    init(codeLifetime: TimeInterval) { self.codeLifetime = codeLifetime }
}
