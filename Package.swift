// swift-tools-version:6.1
import PackageDescription

// Layers, bottom up (see docs/architecture.md):
//   CDBus, CCurl            thin C shims over libdbus and libcurl
//   DBus, HTTP              generic Swift layers over them
//   BrokerAPI               the D-Bus contract's names and error table, plain values only
//   BrokerCore              the broker's logic: no D-Bus, no HTTP, no files
//   Identity                OpenID Connect client on top of HTTP
//   BrokerDaemon, brokerd   the core adapted to the bus
//   SharedDeviceClient      the library apps use; brokerctl is built on it
//   GraphProfile            the tutorial's "Call Graph" (GET /v1.0/me with a token)
//   IdpSim, idp-sim         a local OpenID Connect provider, never linked into brokerd
let package = Package(
    name: "shared-device-broker",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "brokerd", targets: ["brokerd"]),
        .executable(name: "brokerctl", targets: ["brokerctl"]),
        .executable(name: "idp-sim", targets: ["IdpSim"]),
        .library(name: "SharedDeviceClient", targets: ["SharedDeviceClient"]),
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
    ],
    targets: [
        .systemLibrary(name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        // libcurl is not linked: CCurl opens it with dlopen on the first HTTP request (so an idle
        // brokerd, and brokerctl, never load it and OpenSSL/GnuTLS/LDAP/Kerberos with it). Building
        // needs its headers only (Debian: libcurl4-openssl-dev); running an HTTP request, libcurl.so.4.
        .target(name: "CCurl", linkerSettings: [.linkedLibrary("dl")]),

        .target(name: "DBus", dependencies: ["CDBus", .product(name: "Logging", package: "swift-log")], exclude: ["README.md"]),
        .target(name: "HTTP", dependencies: ["CCurl"], exclude: ["README.md"]),
        .target(name: "BrokerAPI"),
        .target(name: "BrokerCore", dependencies: ["BrokerAPI", .product(name: "Logging", package: "swift-log")]),
        .target(name: "Identity", dependencies: [
            "HTTP", "BrokerCore",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "CryptoExtras", package: "swift-crypto"),
        ]),
        .target(name: "BrokerDaemon", dependencies: [
            "DBus", "BrokerAPI", "BrokerCore", "Identity",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "brokerd", dependencies: [
            "BrokerDaemon",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "SharedDeviceClient", dependencies: ["DBus", "BrokerAPI"]),
        .target(name: "GraphProfile", dependencies: ["HTTP"]),
        .executableTarget(name: "brokerctl", dependencies: [
            "SharedDeviceClient", "GraphProfile",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .executableTarget(name: "IdpSim", dependencies: [
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "ExampleSupport", path: "examples/Support"),
        .executableTarget(name: "TutorialApp", dependencies: ["SharedDeviceClient", "GraphProfile", "ExampleSupport"],
                          path: "examples/TutorialApp"),
        .executableTarget(name: "DemoApp", dependencies: ["SharedDeviceClient", "ExampleSupport"], path: "examples/DemoApp"),
        .executableTarget(name: "MultiAppDemo", path: "examples/MultiAppDemo"),

        .testTarget(name: "DBusTests", dependencies: ["DBus"]),
        .testTarget(name: "HTTPTests", dependencies: ["HTTP"]),
        .testTarget(name: "BrokerCoreTests", dependencies: ["BrokerCore", "BrokerAPI"]),
        .testTarget(name: "IdentityTests", dependencies: [
            "Identity", "HTTP",
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "CryptoExtras", package: "swift-crypto"),
        ]),
        .testTarget(name: "IntegrationTests", dependencies: ["SharedDeviceClient", "HTTP", "DBus", "BrokerAPI"]),
        .testTarget(name: "IdpSimTests", dependencies: [
            .product(name: "JWTKit", package: "jwt-kit"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
