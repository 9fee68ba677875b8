// swift-tools-version:6.1
import PackageDescription

#if os(Linux)
import Foundation
#endif

// Layers, bottom up (see docs/architecture.md):
//   CDBus, CCurl            thin C shims over libdbus and libcurl
//   CTPM                    whole TPM 2.0 operations over tpm2-tss's ESAPI, loaded on first use
//   CPCSC                   whole PC/SC operations over libpcsclite (pcscd's client), loaded on first use
//   Locking                 the one lock every layer uses, and the one way to start a thread
//   TaskPool                brokerd's executor for Swift concurrency: threads that sleep until there is work
//   TextRules               the one rule for text from outside (OutsideText), every layer applies it
//   JSON                    the one strict JSON reader (JSONReader, StrictJSON, JSONValue) and writer
//   DBus, HTTP              generic Swift layers over them
//   TPM                     a TPM 2.0 device: secrets sealed behind a PIN, signing keys (nothing links it yet)
//   BadgeReader             contactless badges tapped on a PC/SC reader, as events (nothing links it yet)
//   BrokerAPI               the D-Bus contract's names and error table, plain values only
//   BrokerCore              the broker's logic: no D-Bus, no HTTP, no files
//   Identity                OpenID Connect client on top of HTTP
//   BrokerPersistence       the state file, its journal, the Secret Service: what is kept between runs
//   BrokerDaemon, brokerd   the core adapted to the bus
//   SharedDeviceClient      the library apps use; brokerctl is built on it
//   brokerctl               the command line (ArgumentParser), one program
//   GraphProfile            the tutorial's "Call Graph" (GET /v1.0/me with a token)
//   IdpSim, idp-sim         a local OpenID Connect provider, never linked into brokerd
let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let argumentParser: Target.Dependency = .product(name: "ArgumentParser", package: "swift-argument-parser")
let leanRelease: [LinkerSetting] = [
    .unsafeFlags(leanReleaseLinkerFlags, .when(platforms: [.linux], configuration: .release))
]

let package = Package(
    name: "shared-device-broker",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "brokerd", targets: ["brokerd"]),
        .executable(name: "brokerctl", targets: ["brokerctl"]),
        .executable(name: "idp-sim", targets: ["IdpSim"]),
        .library(name: "SharedDeviceClient", targets: ["SharedDeviceClient"]),
        // For the GTK tutorial window (examples/TutorialWindow, a package of its own).
        .library(name: "GraphProfile", targets: ["GraphProfile"]),
        .executable(name: "tutorial-app", targets: ["TutorialApp"]),
        .executable(name: "demo-app", targets: ["DemoApp"]),
        .executable(name: "multi-app-demo", targets: ["MultiAppDemo"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.0.0"),
        .package(url: "https://github.com/apple/swift-crypto", "4.1.0"..<"5.0.0"),
        // idp-sim's own imports of what Hummingbird is built on.
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.3.0"),
    ],
    targets: [
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        // libcurl is not linked: CCurl opens it with dlopen on the first HTTP request (so an idle
        // brokerd, and brokerctl, never load it and OpenSSL/GnuTLS/LDAP/Kerberos with it). Building
        // needs its headers only (Debian: libcurl4-openssl-dev); running an HTTP request, libcurl.so.4.
        .target(name: "CCurl", linkerSettings: [.linkedLibrary("dl")]),
        // tpm2-tss is not linked either: CTPM opens it with dlopen when a TPM is first opened. Building
        // needs its headers only (Debian: libtss2-dev); opening a TPM, libtss2-esys, -tctildr, -mu and -rc.
        .target(name: "CTPM", linkerSettings: [.linkedLibrary("dl")]),
        // Nor pcsc-lite: CPCSC opens libpcsclite.so.1 when a badge watcher starts. Building needs its
        // headers only (Debian: libpcsclite-dev, which keeps them in /usr/include/PCSC); running, pcscd.
        .target(
            name: "CPCSC", cSettings: [.unsafeFlags(["-I/usr/include/PCSC"])], linkerSettings: [.linkedLibrary("dl")]),

        .target(name: "Locking"),
        // brokerd's executor for Swift concurrency (TaskPool), and the Linux timer it sleeps on.
        .target(name: "CTaskPool"),
        .target(name: "TaskPool", dependencies: ["CTaskPool", "Locking"]),
        .target(name: "CFileWalk"),
        .target(name: "TextRules"),
        .target(name: "JSON"),
        .target(name: "DBus", dependencies: ["CDBus", "Locking", "TextRules", logging], exclude: ["README.md"]),
        .target(name: "HTTP", dependencies: ["CCurl", "Locking"], exclude: ["README.md"]),
        .target(name: "TPM", dependencies: ["CTPM", .product(name: "Crypto", package: "swift-crypto")]),
        .target(name: "BadgeReader", dependencies: ["CPCSC", "Locking", "TextRules", logging]),
        .target(name: "BrokerAPI", dependencies: ["TextRules"]),
        .target(name: "BrokerCore", dependencies: ["BrokerAPI", "Locking", logging]),
        .target(
            name: "Identity",
            dependencies: [
                "HTTP", "BrokerCore", "JSON", "Locking", "TextRules", logging,
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ]),
        .target(
            name: "BrokerPersistence", dependencies: ["DBus", "BrokerCore", "JSON", "Locking", logging]),
        .target(
            name: "BrokerDaemon",
            dependencies: [
                "DBus", "BrokerAPI", "BrokerCore", "BrokerPersistence", "Identity", "JSON", "HTTP", "CFileWalk",
                "Locking",
                logging,
            ]),
        .executableTarget(
            name: "brokerd",
            dependencies: [
                "BrokerDaemon", "BrokerCore", "BrokerPersistence", "TaskPool",
                argumentParser,
                logging,
            ],
            linkerSettings: leanRelease),
        .target(
            name: "SharedDeviceClient",
            dependencies: [
                "DBus", "BrokerAPI", "Locking", logging,
            ]),
        .target(name: "GraphProfile", dependencies: ["HTTP"]),
        .executableTarget(
            name: "brokerctl",
            dependencies: ["SharedDeviceClient", "GraphProfile", "BrokerAPI", "TextRules", argumentParser],
            linkerSettings: leanRelease),
        .executableTarget(
            name: "IdpSim",
            dependencies: [
                "Locking",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                argumentParser,
                logging,
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ], exclude: ["README.md"]),
        .target(name: "ExampleSupport", path: "examples/Support"),
        .executableTarget(
            name: "TutorialApp", dependencies: ["SharedDeviceClient", "GraphProfile", "ExampleSupport"],
            path: "examples/TutorialApp"),
        .executableTarget(
            name: "DemoApp", dependencies: ["SharedDeviceClient", "GraphProfile", "ExampleSupport"],
            path: "examples/DemoApp"),
        .executableTarget(name: "MultiAppDemo", dependencies: ["ExampleSupport"], path: "examples/MultiAppDemo"),

        // What every test target shares: private buses, idp-sim, processes spawned with posix_spawn.
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        .target(name: "CoreFakes", dependencies: ["BrokerCore"], path: "Tests/CoreFakes"),
        .testTarget(name: "TextRulesTests", dependencies: ["TextRules"]),
        .testTarget(name: "JSONTests", dependencies: ["JSON"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "Locking", "TestSupport"]),
        .testTarget(name: "HTTPTests", dependencies: ["HTTP", "Locking"]),
        .testTarget(
            name: "TPMTests",
            dependencies: ["TPM", "CTPM", "TestSupport", .product(name: "Crypto", package: "swift-crypto")]),
        // Serialized (--no-parallel or one at a time): libpcsclite reads its socket's path once per process.
        .testTarget(name: "BadgeReaderTests", dependencies: ["BadgeReader", "TestSupport", logging]),
        .testTarget(
            name: "BrokerCoreTests",
            dependencies: [
                "BrokerCore", "BrokerAPI", "Locking", logging,
            ]),
        .testTarget(name: "SharedDeviceClientTests", dependencies: ["SharedDeviceClient", "DBus", "BrokerAPI"]),
        .testTarget(
            name: "BrokerDaemonTests",
            dependencies: [
                "BrokerDaemon", "BrokerCore", "CoreFakes", "Locking", "TestSupport", logging,
            ]),
        .testTarget(
            name: "BrokerPersistenceTests",
            dependencies: [
                "BrokerPersistence", "BrokerCore", "CoreFakes", "Locking", logging,
            ]),
        .testTarget(
            name: "IdentityTests",
            dependencies: [
                "Identity", "HTTP", "BrokerCore", "JSON", "Locking", "TestSupport", logging,
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ]),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "SharedDeviceClient", "HTTP", "DBus", "CDBus", "BrokerAPI", "Locking", "TestSupport",
            ]),
        .testTarget(
            name: "IdpSimTests",
            dependencies: [
                "Locking", "TestSupport",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)

/// How a release brokerd and brokerctl are linked on Linux, for a small idle RSS and a quick start
/// (BENCHMARKS.md, "What changed since the first run", has the measurements); debug builds are untouched:
/// - lld with packed relative relocations (DT_RELR, glibc 2.36+): the executable stays position-independent
///   (ASLR) without a relocation table that the dynamic loader reads through at every start.
/// - `--no-export-dynamic`: the static runtime's driver file would export every symbol of the executable,
///   and brokerd is no plugin host.
/// - libstdc++ (needed by the Swift runtime) from its static archive, so that the dynamic loader neither maps
///   nor relocates libstdc++.so, nor searches its symbol tables for every libc symbol. `--remap-inputs` is the
///   one way to turn the toolchain's own `-lstdc++` into the archive; without an archive it stays dynamic.
var leanReleaseLinkerFlags: [String] {
    var flags = [
        "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker", "--no-export-dynamic",
    ]
    #if os(Linux)
    if let archive = staticLibstdcxx() {
        flags += ["-Xlinker", "--remap-inputs=*/libstdc++.so=\(archive)"]
    }
    #endif
    return flags
}

#if os(Linux)
/// The newest GCC's `libstdc++.a` (the GCC installation clang links against), if one is installed.
func staticLibstdcxx() -> String? {
    let files = FileManager.default
    #if arch(x86_64)
    let triples = ["x86_64-linux-gnu", "x86_64-redhat-linux", "x86_64-pc-linux-gnu"]
    #else
    let triples = ["aarch64-linux-gnu", "aarch64-redhat-linux", "aarch64-unknown-linux-gnu"]
    #endif
    for root in ["/usr/lib/gcc", "/usr/lib64/gcc"] {
        for triple in triples {
            let directory = "\(root)/\(triple)"
            guard let versions = try? files.contentsOfDirectory(atPath: directory) else { continue }
            let newest = versions.compactMap { name -> (Int, String)? in
                guard let major = Int(name.split(separator: ".").first ?? ""),
                    files.fileExists(atPath: "\(directory)/\(name)/libstdc++.a")
                else { return nil }
                return (major, name)
            }.max { $0.0 < $1.0 }
            if let newest { return "\(directory)/\(newest.1)/libstdc++.a" }
        }
    }
    return nil
}
#endif
