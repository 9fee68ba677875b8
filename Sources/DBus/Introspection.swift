/// Description of one D-Bus interface, used for dispatch checks and introspection.
public struct DBusInterfaceDescription: Sendable, Equatable {
    /// An `<annotation>`: a fact about an interface, method or argument that its types do not say
    /// (the specification's `org.freedesktop.DBus.Deprecated`, or a project's own).
    public struct Annotation: Sendable, Equatable {
        /// Annotation name, an interface-like dotted name.
        public var name: String
        /// Its value.
        public var value: String
        /// Creates an annotation.
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    /// A method or signal argument.
    public struct Argument: Sendable, Equatable {
        /// Argument name (may be empty).
        public var name: String
        /// Single complete type signature.
        public var signature: String
        /// Annotations, in the order introspection lists them.
        public var annotations: [Annotation]
        /// Creates an argument.
        public init(_ name: String, _ signature: String, annotations: [Annotation] = []) {
            self.name = name
            self.signature = signature
            self.annotations = annotations
        }
    }

    /// A method.
    public struct Method: Sendable, Equatable {
        /// Method name.
        public var name: String
        /// Input arguments.
        public var inArguments: [Argument] { didSet { inSignature = Self.signature(of: inArguments) } }
        /// Output arguments.
        public var outArguments: [Argument] { didSet { outSignature = Self.signature(of: outArguments) } }
        /// Concatenated signature of the input arguments. Kept beside them, not derived on each
        /// read: every call the object server dispatches is checked against it.
        public private(set) var inSignature: String
        /// Concatenated signature of the output arguments (each reply is checked against it).
        public private(set) var outSignature: String
        /// Annotations, in the order introspection lists them (before the arguments).
        public var annotations: [Annotation]
        /// Creates a method.
        public init(
            name: String, inArguments: [Argument] = [], outArguments: [Argument] = [],
            annotations: [Annotation] = []
        ) {
            self.name = name
            self.inArguments = inArguments
            self.outArguments = outArguments
            inSignature = Self.signature(of: inArguments)
            outSignature = Self.signature(of: outArguments)
            self.annotations = annotations
        }
        /// Whether the method carries the annotation `name` with the value `true`.
        public func isAnnotated(_ name: String) -> Bool {
            annotations.contains { $0.name == name && $0.value == "true" }
        }
        private static func signature(of arguments: [Argument]) -> String {
            arguments.reduce(into: "") { $0 += $1.signature }
        }
    }

    /// A signal.
    public struct Signal: Sendable, Equatable {
        /// Signal name.
        public var name: String
        /// Arguments.
        public var arguments: [Argument]
        /// Creates a signal.
        public init(name: String, arguments: [Argument] = []) {
            self.name = name
            self.arguments = arguments
        }
    }

    /// A property.
    public struct Property: Sendable, Equatable {
        /// Access mode of a property.
        public enum Access: String, Sendable, Equatable {
            /// Readable only.
            case read
            /// Writable only.
            case write
            /// Readable and writable.
            case readwrite
        }
        /// Value of the `org.freedesktop.DBus.Property.EmitsChangedSignal` annotation.
        public enum EmitsChangedSignal: String, Sendable, Equatable {
            /// PropertiesChanged carries the new value (the default when absent).
            case `true`
            /// PropertiesChanged lists the property as invalidated.
            case invalidates
            /// The value never changes.
            case const
            /// No PropertiesChanged signal is emitted.
            case `false`
        }
        /// Property name.
        public var name: String
        /// Single complete type signature.
        public var signature: String
        /// Access mode.
        public var access: Access
        /// Optional EmitsChangedSignal annotation.
        public var emitsChangedSignal: EmitsChangedSignal?
        /// Its other annotations, after EmitsChangedSignal.
        public var annotations: [Annotation]
        /// Creates a property.
        public init(
            name: String, signature: String, access: Access = .read, emitsChangedSignal: EmitsChangedSignal? = nil,
            annotations: [Annotation] = []
        ) {
            self.name = name
            self.signature = signature
            self.access = access
            self.emitsChangedSignal = emitsChangedSignal
            self.annotations = annotations
        }
    }

    /// Interface name.
    public var name: String
    /// Methods.
    public var methods: [Method]
    /// Signals.
    public var signals: [Signal]
    /// Properties.
    public var properties: [Property]
    /// Annotations of the interface itself, listed before its members.
    public var annotations: [Annotation]

    /// Creates an interface description.
    public init(
        name: String, methods: [Method] = [], signals: [Signal] = [], properties: [Property] = [],
        annotations: [Annotation] = []
    ) {
        self.name = name
        self.methods = methods
        self.signals = signals
        self.properties = properties
        self.annotations = annotations
    }

    /// The `<interface>` element: 2-space indentation, one element per line,
    /// attributes ordered name, type, direction/access. Starts at column 0.
    public var introspectionXML: String {
        var out = "<interface name=\"\(xmlEscape(name))\">\n"
        func annotation(_ a: Annotation, indent: String) -> String {
            indent + "<annotation name=\"\(xmlEscape(a.name))\" value=\"\(xmlEscape(a.value))\"/>\n"
        }
        func arg(_ a: Argument, _ direction: String?) -> String {
            var s = "    <arg"
            if !a.name.isEmpty { s += " name=\"\(xmlEscape(a.name))\"" }
            s += " type=\"\(xmlEscape(a.signature))\""
            if let direction { s += " direction=\"\(direction)\"" }
            if a.annotations.isEmpty { return s + "/>\n" }
            return s + ">\n" + a.annotations.map { annotation($0, indent: "      ") }.joined() + "    </arg>\n"
        }
        for a in annotations { out += annotation(a, indent: "  ") }
        for m in methods {
            if m.inArguments.isEmpty && m.outArguments.isEmpty && m.annotations.isEmpty {
                out += "  <method name=\"\(xmlEscape(m.name))\"/>\n"
                continue
            }
            out += "  <method name=\"\(xmlEscape(m.name))\">\n"
            for a in m.annotations { out += annotation(a, indent: "    ") }
            for a in m.inArguments { out += arg(a, "in") }
            for a in m.outArguments { out += arg(a, "out") }
            out += "  </method>\n"
        }
        for s in signals {
            if s.arguments.isEmpty {
                out += "  <signal name=\"\(xmlEscape(s.name))\"/>\n"
                continue
            }
            out += "  <signal name=\"\(xmlEscape(s.name))\">\n"
            for a in s.arguments { out += arg(a, nil) }
            out += "  </signal>\n"
        }
        for p in properties {
            let head =
                "  <property name=\"\(xmlEscape(p.name))\" type=\"\(xmlEscape(p.signature))\" "
                + "access=\"\(p.access.rawValue)\""
            var notes = p.annotations
            if let emits = p.emitsChangedSignal {
                notes.insert(Annotation("org.freedesktop.DBus.Property.EmitsChangedSignal", emits.rawValue), at: 0)
            }
            if notes.isEmpty {
                out += head + "/>\n"
            } else {
                out += head + ">\n"
                for note in notes {
                    out += "    <annotation name=\"\(xmlEscape(note.name))\" value=\"\(xmlEscape(note.value))\"/>\n"
                }
                out += "  </property>\n"
            }
        }
        out += "</interface>\n"
        return out
    }

    /// The method named `member`, if any.
    public func method(named member: String) -> Method? { methods.first { $0.name == member } }
    /// The property named `name`, if any.
    func property(named name: String) -> Property? { properties.first { $0.name == name } }
}

extension DBusInterfaceDescription {
    /// `org.freedesktop.DBus.Introspectable`.
    public static let introspectable = DBusInterfaceDescription(
        name: "org.freedesktop.DBus.Introspectable",
        methods: [.init(name: "Introspect", outArguments: [.init("xml_data", "s")])])

    /// `org.freedesktop.DBus.Properties`.
    public static let properties = DBusInterfaceDescription(
        name: "org.freedesktop.DBus.Properties",
        methods: [
            .init(
                name: "Get", inArguments: [.init("interface_name", "s"), .init("property_name", "s")],
                outArguments: [.init("value", "v")]),
            .init(
                name: "GetAll", inArguments: [.init("interface_name", "s")],
                outArguments: [.init("props", "a{sv}")]),
            .init(
                name: "Set",
                inArguments: [.init("interface_name", "s"), .init("property_name", "s"), .init("value", "v")]),
        ],
        signals: [
            .init(
                name: "PropertiesChanged",
                arguments: [
                    .init("interface_name", "s"), .init("changed_properties", "a{sv}"),
                    .init("invalidated_properties", "as"),
                ])
        ])

    /// `org.freedesktop.DBus.Peer`.
    public static let peer = DBusInterfaceDescription(
        name: "org.freedesktop.DBus.Peer",
        methods: [.init(name: "Ping"), .init(name: "GetMachineId", outArguments: [.init("machine_uuid", "s")])])

    /// The standard interfaces every exported object implements.
    static let standard: [DBusInterfaceDescription] = [introspectable, properties, peer]
}

/// Introspection document for one node.
enum Introspection {
    static let doctype = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">

        """

    /// `interfaces` nil means the path has no object (only children).
    static func document(interfaces: [DBusInterfaceDescription]?, children: [String]) -> String {
        var out = doctype + "<node>\n"
        if let interfaces {
            for iface in DBusInterfaceDescription.standard + interfaces {
                for line in iface.introspectionXML.split(separator: "\n") {
                    out += "  " + line + "\n"
                }
            }
        }
        for child in children { out += "  <node name=\"\(xmlEscape(child))\"/>\n" }
        out += "</node>\n"
        return out
    }
}

func xmlEscape(_ s: String) -> String {
    guard
        s.utf8.contains(where: {
            $0 == UInt8(ascii: "&") || $0 == UInt8(ascii: "<") || $0 == UInt8(ascii: ">") || $0 == UInt8(ascii: "\"")
                || $0 == UInt8(ascii: "'")
        })
    else { return s }
    var out = ""
    for ch in s {
        switch ch {
        case "&": out += "&amp;"
        case "<": out += "&lt;"
        case ">": out += "&gt;"
        case "\"": out += "&quot;"
        case "'": out += "&apos;"
        default: out.append(ch)
        }
    }
    return out
}
