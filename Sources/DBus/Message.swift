import CDBus

/// A decoded D-Bus message (all strings copied out of libdbus).
public struct DBusMessage: Sendable {
    /// The kind of message.
    public enum MessageType: Sendable, Hashable {
        /// A method call.
        case methodCall
        /// A successful method reply.
        case methodReturn
        /// An error reply.
        case error
        /// A signal.
        case signal
        /// A type this library does not know.
        case unknown(Int32)
    }

    /// The message type.
    public var type: MessageType
    /// Object path (calls and signals).
    public var path: String?
    /// Interface (signals; optional for calls).
    public var interface: String?
    /// Member name (calls and signals).
    public var member: String?
    /// Error name (error replies).
    public var errorName: String?
    /// Unique name of the sender, if the bus set it.
    public var sender: String?
    /// Destination name, if any.
    public var destination: String?
    /// Serial of this message.
    public var serial: UInt32
    /// Serial of the call this replies to (0 if none).
    public var replySerial: UInt32
    /// Signature of the body.
    public var signature: String
    /// Decoded body.
    public var arguments: [DBusValue]
    /// Whether the sender asked for no reply (method calls).
    public var noReplyExpected: Bool

    /// Decodes the header fields only (no body).
    init(header raw: OpaquePointer) {
        switch dbus_message_get_type(raw) {
        case Int32(CDBUS_MESSAGE_TYPE_METHOD_CALL): type = .methodCall
        case Int32(CDBUS_MESSAGE_TYPE_METHOD_RETURN): type = .methodReturn
        case Int32(CDBUS_MESSAGE_TYPE_ERROR): type = .error
        case Int32(CDBUS_MESSAGE_TYPE_SIGNAL): type = .signal
        case let other: type = .unknown(other)
        }
        func copy(_ p: UnsafePointer<CChar>?) -> String? { p.map { String(cString: $0) } }
        path = copy(dbus_message_get_path(raw))
        interface = copy(dbus_message_get_interface(raw))
        member = copy(dbus_message_get_member(raw))
        errorName = copy(dbus_message_get_error_name(raw))
        sender = copy(dbus_message_get_sender(raw))
        destination = copy(dbus_message_get_destination(raw))
        serial = dbus_message_get_serial(raw)
        replySerial = dbus_message_get_reply_serial(raw)
        signature = copy(dbus_message_get_signature(raw)) ?? ""
        arguments = []
        noReplyExpected = dbus_message_get_no_reply(raw) != 0
    }

    /// Decodes header and body.
    init(decoding raw: OpaquePointer) throws(DBusError) {
        self.init(header: raw)
        arguments = try DBusCodec.decodeArguments(raw)
    }
}

/// An incoming method call for an exported object.
public struct DBusMethodCall: Sendable {
    /// Unique bus name of the caller (empty on peer-to-peer connections).
    public var sender: String
    /// Object path called.
    public var path: String
    /// Interface of the method (resolved by member name when the caller omitted it).
    public var interface: String
    /// Method name.
    public var member: String
    /// Signature of the arguments.
    public var signature: String
    /// Decoded arguments.
    public var arguments: [DBusValue]

    /// Creates a method call value (useful for tests of `DBusObject` implementations).
    public init(
        sender: String, path: String, interface: String, member: String, signature: String, arguments: [DBusValue]
    ) {
        self.sender = sender
        self.path = path
        self.interface = interface
        self.member = member
        self.signature = signature
        self.arguments = arguments
    }
}

/// A received signal.
public struct DBusSignal: Sendable {
    /// Unique bus name of the emitter.
    public var sender: String
    /// Object path of the emitter.
    public var path: String
    /// Interface of the signal.
    public var interface: String
    /// Signal name.
    public var member: String
    /// Decoded arguments.
    public var arguments: [DBusValue]

    /// Creates a signal value.
    public init(sender: String, path: String, interface: String, member: String, arguments: [DBusValue]) {
        self.sender = sender
        self.path = path
        self.interface = interface
        self.member = member
        self.arguments = arguments
    }
}

/// A retained libdbus message handed between threads. libdbus messages are
/// not bound to a connection until sent and their refcount is atomic.
struct MessageRef: @unchecked Sendable {
    let raw: OpaquePointer
    func release() { dbus_message_unref(raw) }
}

/// Construction of outgoing libdbus messages from validated Swift values.
enum MessageBuilder {
    private static func finish(_ raw: OpaquePointer?, _ arguments: [DBusValue]) throws(DBusError) -> MessageRef {
        guard let raw else { throw .noMemory() }
        guard DBusCodec.append(arguments, to: raw) else {
            dbus_message_unref(raw)
            throw .noMemory()
        }
        return MessageRef(raw: raw)
    }

    static func methodCall(
        destination: String?, path: String, interface: String?, member: String,
        arguments: [DBusValue]
    ) throws(DBusError) -> MessageRef {
        if let destination { try DBusValidation.busName(destination) }
        try DBusValidation.path(path)
        if let interface { try DBusValidation.interface(interface) }
        try DBusValidation.member(member)
        try DBusValidation.arguments(arguments)
        let raw = path.withCString { p in
            member.withCString { m in
                withOptionalCString(destination) { d in
                    withOptionalCString(interface) { i in dbus_message_new_method_call(d, p, i, m) }
                }
            }
        }
        return try finish(raw, arguments)
    }

    static func signal(
        path: String, interface: String, member: String, destination: String? = nil,
        arguments: [DBusValue]
    ) throws(DBusError) -> MessageRef {
        try DBusValidation.path(path)
        try DBusValidation.interface(interface)
        try DBusValidation.member(member)
        if let destination { try DBusValidation.busName(destination) }
        try DBusValidation.arguments(arguments)
        let raw = path.withCString { p in
            interface.withCString { i in member.withCString { m in dbus_message_new_signal(p, i, m) } }
        }
        let message = try finish(raw, arguments)
        if let destination {
            guard destination.withCString({ dbus_message_set_destination(message.raw, $0) }) != 0 else {
                message.release()
                throw .noMemory()
            }
        }
        return message
    }

    /// A reply (return or error) addressed to `target`.
    private static func reply(type: Int32, to target: ReplyTarget) throws(DBusError) -> OpaquePointer {
        try address(dbus_message_new(type), to: target)
    }

    /// `raw` (a new reply, owned) made the reply to `target`; released when that fails.
    fileprivate static func address(_ raw: OpaquePointer?, to target: ReplyTarget) throws(DBusError) -> OpaquePointer {
        guard let raw else { throw .noMemory() }
        dbus_message_set_no_reply(raw, 1)
        var ok = dbus_message_set_reply_serial(raw, target.serial) != 0
        if ok, !target.sender.isEmpty {
            ok = target.sender.withCString { dbus_message_set_destination(raw, $0) } != 0
        }
        guard ok else {
            dbus_message_unref(raw)
            throw .noMemory()
        }
        return raw
    }

    static func methodReturn(to target: ReplyTarget, arguments: [DBusValue]) throws(DBusError) -> MessageRef {
        try DBusValidation.arguments(arguments)
        let raw = try reply(type: Int32(CDBUS_MESSAGE_TYPE_METHOD_RETURN), to: target)
        return try finish(raw, arguments)
    }

    static func error(to target: ReplyTarget, _ error: DBusError) throws(DBusError) -> MessageRef {
        var error = error
        if !DBusValidation.isValidErrorName(error.name) { error = .failed(error.description) }
        if !DBusValidation.isValidString(error.message) { error.message = "(invalid error message)" }
        let raw = try reply(type: Int32(CDBUS_MESSAGE_TYPE_ERROR), to: target)
        guard error.name.withCString({ dbus_message_set_error_name(raw, $0) }) != 0 else {
            dbus_message_unref(raw)
            throw .noMemory()
        }
        return try finish(raw, [.string(error.message)])
    }
}

/// Where to send the reply of an incoming method call.
struct ReplyTarget: Sendable {
    var sender: String
    var serial: UInt32
    var noReply: Bool
}

func withOptionalCString<R>(_ s: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let s else { return body(nil) }
    return s.withCString { body($0) }
}

/// A method return's arguments marshalled once, for an answer many calls share (the same
/// account, to every app that asks): each reply is a copy of it with its own destination and
/// reply serial, so the values are neither checked nor marshalled again per call.
public final class DBusPreparedReply: @unchecked Sendable {
    /// A method return that is never sent itself, only copied; immutable once built.
    fileprivate let template: OpaquePointer
    /// The arguments' signature, checked against the method's out-signature at each use.
    public let signature: String

    public init(_ arguments: [DBusValue]) throws(DBusError) {
        try DBusValidation.arguments(arguments)
        guard let raw = dbus_message_new(Int32(CDBUS_MESSAGE_TYPE_METHOD_RETURN)) else { throw .noMemory() }
        guard DBusCodec.append(arguments, to: raw) else {
            dbus_message_unref(raw)
            throw .noMemory()
        }
        template = raw
        signature = DBusSignature.of(arguments)
    }

    deinit { dbus_message_unref(template) }
}

extension MessageBuilder {
    /// A copy of `prepared` addressed as the reply to `target`.
    static func methodReturn(to target: ReplyTarget, prepared: DBusPreparedReply) throws(DBusError) -> MessageRef {
        MessageRef(raw: try address(dbus_message_copy(prepared.template), to: target))
    }
}
