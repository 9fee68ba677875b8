// swift-tools-version:6.1
import PackageDescription

// The shared-device tutorial as a GTK 4 window (libadwaita). A package of its own, so that
// building brokerd never needs GTK's headers; it uses the root package's client library by path.
let package = Package(
    name: "TutorialWindow",
    products: [.executable(name: "tutorial-window", targets: ["TutorialWindow"])],
    dependencies: [.package(name: "shared-device-broker", path: "../..")],
    targets: [
        // GTK 4 and libadwaita through one small C shim: their macros and variadic functions as
        // typed inline functions, as CDBus does for libdbus.
        .systemLibrary(
            name: "CGtk", pkgConfig: "libadwaita-1", providers: [.apt(["libgtk-4-dev", "libadwaita-1-dev"])]),
        .executableTarget(
            name: "TutorialWindow",
            dependencies: [
                "CGtk",
                .product(name: "SharedDeviceClient", package: "shared-device-broker"),
                .product(name: "GraphProfile", package: "shared-device-broker"),
            ]),
    ]
)
