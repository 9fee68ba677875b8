// The provider's signing keys: JSONWebKeySet.parse (JWKS.swift) with every member reader, then
// lookups and a signature check with each key it kept, on attacker-chosen key parameters.
import Crypto
import CryptoExtras

@testable import Identity

private let digest = SHA256.hash(data: Array("header.payload".utf8))

func fuzzOne(_ bytes: [UInt8]) {
    guard let set = try? JSONWebKeySet.parse(bytes) else { return }
    for key in set.keys {
        if case .rsa(let publicKey) = key.material, publicKey.keySizeInBits > JSONWebKeySet.maximumRSABits {
            violated("an RSA key above the size limit was kept")
        }
        // A key is always found by its own kid and algorithm.
        if let kid = key.kid {
            guard case .found = set.lookup(kid: kid, algorithm: key.algorithm) else {
                violated("a key is not found by its own kid and algorithm")
            }
        }
        // A signature of the right length but wrong content never verifies.
        let length: Int
        switch key.material {
        case .p256: length = 64
        case .rsa(let publicKey): length = (publicKey.keySizeInBits + 7) / 8
        }
        if IDTokenValidator.verify([UInt8](repeating: 0x5A, count: length), digest: digest, with: key) {
            violated("a made-up signature verified")
        }
        _ = IDTokenValidator.verify([], digest: digest, with: key)
    }
    for algorithm in JWSAlgorithm.allCases {
        switch set.lookup(kid: nil, algorithm: algorithm) {
        case .found(let key): if key.algorithm != algorithm { violated("a key for another algorithm was found") }
        case .wrongAlgorithm: violated("wrongAlgorithm without a kid")
        case .ambiguous, .notFound: break
        }
        _ = set.lookup(kid: "", algorithm: algorithm)
    }
}
