import CDBus
import Locking
import Logging
import TextRules

/// An object exported on a connection.
///
/// The connection implements `org.freedesktop.DBus.Introspectable`,
/// `org.freedesktop.DBus.Properties` and `org.freedesktop.DBus.Peer` for it,
/// using `interfaces` and `propertyValues(interface:)`.
public protocol DBusObject: AnyObject, Sendable {
    /// The object's own interfaces (without the standard ones).
    var interfaces: [DBusInterfaceDescription] { get }

    /// Called for methods of `interfaces` only, after the layer checked that the
    /// call's signature equals the method's in-signature (else it replies
    /// org.freedesktop.DBus.Error.InvalidArgs itself). Throw `DBusError` for an
    /// error reply; any other error becomes org.freedesktop.DBus.Error.Failed.
    /// The returned values must match the method's out-signature. Runs in a task of its own,
    /// whose ``DBusCallControl/current`` can cancel it or answer the caller early.
    func handleMethodCall(_ call: DBusMethodCall) async throws -> [DBusValue]

    /// Answers a call on the connection's thread, before any task is started, when the answer
    /// is at hand (a read of state kept behind a lock); nil hands the call to
    /// `handleMethodCall`. It must neither block nor wait: every call on the connection waits
    /// behind it. The checks and the out-signature rule of `handleMethodCall` apply. The
    /// default answers nothing here.
    func answerImmediately(_ call: DBusMethodCall) -> DBusAnswer?

    /// Current values for org.freedesktop.DBus.Properties Get/GetAll. Called on the
    /// connection's thread: keep it fast and non-blocking.
    func propertyValues(interface: String) -> [String: DBusValue]

    /// Called for Properties.Set on a writable property, after the layer checked
    /// the interface, the property and the value's signature. The default throws
    /// PropertyReadOnly.
    func setProperty(interface: String, name: String, value: DBusValue) async throws
}

extension DBusObject {
    public func answerImmediately(_ call: DBusMethodCall) -> DBusAnswer? { nil }

    /// Default: every property is read-only.
    public func setProperty(interface: String, name: String, value: DBusValue) async throws {
        throw DBusError.propertyReadOnly("Property \(name) is read-only")
    }
}

/// An answer given at once on the connection's thread (``DBusObject/answerImmediately(_:)``).
public enum DBusAnswer: Sendable {
    case values([DBusValue])
    /// Arguments marshalled before, shared by many calls.
    case prepared(DBusPreparedReply)
    case error(DBusError)
}

/// Exported objects by path; shared between callers of export/unexport and the connection thread.
final class ObjectRegistry: @unchecked Sendable {
    private let lock = Locked(())
    private var objects: [String: any DBusObject] = [:]

    func set(_ object: (any DBusObject)?, at path: String) {
        lock.withLock { _ in objects[path] = object }
    }

    func object(at path: String) -> (any DBusObject)? {
        lock.withLock { _ in objects[path] }
    }

    /// Names of the direct children of `path` that lead to exported objects.
    func children(of path: String) -> [String] {
        let prefix = path == "/" ? "/" : path + "/"
        var names = Set<String>()
        lock.withLock { _ in
            for key in objects.keys where key.hasPrefix(prefix) && key != path {
                let rest = key.dropFirst(prefix.count)
                if let first = rest.split(separator: "/", maxSplits: 1).first { names.insert(String(first)) }
            }
        }
        return names.sorted()
    }
}

// MARK: - Dispatch (runs on the connection thread)

extension ConnectionLoop {
    /// Handles an incoming method call. Standard interfaces, and the object methods the object
    /// can answer at once, are answered on the thread; the other object methods run in one
    /// Task whose reply comes back through the queue.
    func dispatchMethodCall(_ raw: OpaquePointer) {
        var message = DBusMessage(header: raw)
        let target = ReplyTarget(sender: message.sender ?? "", serial: message.serial, noReply: message.noReplyExpected)
        do {
            message.arguments = try DBusCodec.decodeArguments(raw)
        } catch {
            reply(target, .failure(error))
            return
        }
        let path = message.path ?? "/"
        let member = message.member ?? ""
        let object = objects.object(at: path)
        let ifaceName = message.interface.flatMap { $0.isEmpty ? nil : $0 }
        let own = object?.interfaces ?? []

        // Resolve the interface: explicit, or by member name (own first, then standard).
        let interface: DBusInterfaceDescription
        if let ifaceName {
            if let found = own.first(where: { $0.name == ifaceName })
                ?? DBusInterfaceDescription.standard.first(where: { $0.name == ifaceName })
            {
                interface = found
            } else if object == nil {
                reply(target, .failure(.unknownObject("No object at \(path)")))
                return
            } else {
                reply(target, .failure(.unknownInterface("No interface \(ifaceName) at \(path)")))
                return
            }
        } else if let found = (own + DBusInterfaceDescription.standard).first(where: { $0.method(named: member) != nil }
        ) {
            interface = found
        } else {
            reply(
                target,
                .failure(
                    object == nil
                        ? .unknownObject("No object at \(path)") : .unknownMethod("No method \(member) at \(path)")))
            return
        }
        guard let method = interface.method(named: member) else {
            reply(target, .failure(.unknownMethod("No method \(member) in \(interface.name)")))
            return
        }
        guard message.signature == method.inSignature else {
            reply(
                target,
                .failure(
                    .invalidArgs(
                        "Method \(interface.name).\(member) expects signature \"\(method.inSignature)\", got "
                            + "\"\(message.signature)\""
                    )))
            return
        }

        switch interface.name {
        case DBusInterfaceDescription.introspectable.name:
            let children = objects.children(of: path)
            if object == nil && children.isEmpty {
                reply(target, .failure(.unknownObject("No object at \(path)")))
            } else {
                reply(
                    target,
                    .success([.string(Introspection.document(interfaces: object.map { _ in own }, children: children))])
                )
            }
        case DBusInterfaceDescription.peer.name:
            if member == "Ping" {
                reply(target, .success([]))
            } else {
                reply(target, machineID())
            }
        case DBusInterfaceDescription.properties.name:
            guard let object else {
                reply(target, .failure(.unknownObject("No object at \(path)")))
                return
            }
            handleProperties(object, own, member: member, arguments: message.arguments, target: target)
        default:
            guard let object else {
                reply(target, .failure(.unknownObject("No object at \(path)")))
                return
            }
            let call = DBusMethodCall(
                sender: target.sender, path: path, interface: interface.name, member: member,
                signature: message.signature, arguments: message.arguments)
            let outSignature = method.outSignature
            switch object.answerImmediately(call) {
            case .values(let values)?:
                reply(target, checked(.success(values), of: call, outSignature: outSignature))
                return
            case .error(let error)?:
                reply(target, .failure(error))
                return
            case .prepared(let prepared)?:
                if prepared.signature == outSignature {
                    replyPrepared(target, prepared)
                } else {
                    reply(
                        target,
                        checked(.success([]), of: call, outSignature: outSignature, signature: prepared.signature))
                }
                return
            case nil:
                break
            }
            let control = DBusCallControl { [self] result in
                switch result {
                case .success(let values): reply(target, values: values)
                case .failure(let error): reply(target, error: error)
                }
            }
            control.attach(
                Task { [self] in
                    let answer: Result<[DBusValue], DBusError>
                    do {
                        answer = .success(
                            try await DBusCallControl.$current.withValue(control) {
                                try await object.handleMethodCall(call)
                            })
                    } catch let error as DBusError {
                        answer = .failure(error)
                    } catch {
                        answer = .failure(.failed(String(describing: error)))
                    }
                    control.finish(checked(answer, of: call, outSignature: outSignature))
                })
        }
    }

    /// A handler's answer, or Failed when its values do not have the method's out-signature.
    private func checked(
        _ answer: Result<[DBusValue], DBusError>, of call: DBusMethodCall,
        outSignature: String, signature given: String? = nil
    ) -> Result<[DBusValue], DBusError> {
        guard case .success(let values) = answer else { return answer }
        let signature = given ?? DBusSignature.of(values)
        guard signature != outSignature else { return answer }
        logger.error(
            "Handler returned wrong signature",
            metadata: [
                "method": "\(call.interface).\(call.member)", "expected": "\(outSignature)", "got": "\(signature)",
            ])
        return .failure(
            .failed("Handler for \(call.member) returned signature \"\(signature)\", expected \"\(outSignature)\""))
    }

    private func machineID() -> Result<[DBusValue], DBusError> {
        var err = CDBus.DBusError()
        dbus_error_init(&err)
        guard let id = dbus_try_get_local_machine_id(&err) else {
            let message = err.message.map { String(cString: $0) } ?? "machine id unavailable"
            dbus_error_free(&err)
            return .failure(.failed(message))
        }
        defer { dbus_free(id) }
        return .success([.string(String(cString: id))])
    }

    private func handleProperties(
        _ object: any DBusObject, _ own: [DBusInterfaceDescription], member: String,
        arguments: [DBusValue], target: ReplyTarget
    ) {
        let ifaceName = arguments.first?.string ?? ""
        if DBusInterfaceDescription.standard.contains(where: { $0.name == ifaceName }) {
            switch member {
            case "GetAll": reply(target, .success([.vardict([:])]))
            case "Get":
                // The caller's own text, echoed: escaped, as every outside value in a message.
                let name = OutsideText.escaped(arguments.dropFirst().first?.string ?? "")
                reply(target, .failure(.unknownProperty("No property \(name) in \(ifaceName)")))
            default: reply(target, .failure(.propertyReadOnly("Properties of \(ifaceName) are read-only")))
            }
            return
        }
        // An empty interface name means: search all interfaces (Get/Set); GetAll returns all.
        let candidates = ifaceName.isEmpty ? own : own.filter { $0.name == ifaceName }
        guard !candidates.isEmpty else {
            reply(target, .failure(.unknownInterface("No interface \(OutsideText.escaped(ifaceName))")))
            return
        }
        switch member {
        case "GetAll":
            var all: [String: DBusValue] = [:]
            for iface in candidates {
                let values = object.propertyValues(interface: iface.name)
                for p in iface.properties where p.access != .write {
                    if let v = values[p.name] { all[p.name] = v }
                }
            }
            reply(target, .success([.vardict(all)]))
        case "Get":
            let name = arguments.dropFirst().first?.string ?? ""
            for iface in candidates {
                guard let property = iface.property(named: name) else { continue }
                if property.access != .write, let value = object.propertyValues(interface: iface.name)[name] {
                    reply(target, .success([.variant(value)]))
                } else {
                    reply(target, .failure(.unknownProperty("Property \(name) of \(iface.name) cannot be read")))
                }
                return
            }
            reply(target, .failure(.unknownProperty("No property \(OutsideText.escaped(name)) in \(ifaceName)")))
        default:  // Set
            let name = arguments.dropFirst().first?.string ?? ""
            let value = arguments.dropFirst(2).first?.variantValue ?? .variant(.string(""))
            guard let iface = candidates.first(where: { $0.property(named: name) != nil }),
                let property = iface.property(named: name)
            else {
                reply(target, .failure(.unknownProperty("No property \(OutsideText.escaped(name)) in \(ifaceName)")))
                return
            }
            guard property.access != .read else {
                reply(target, .failure(.propertyReadOnly("Property \(name) is read-only")))
                return
            }
            guard value.signature == property.signature else {
                reply(
                    target,
                    .failure(
                        .invalidArgs("Property \(name) has type \"\(property.signature)\", got \"\(value.signature)\""))
                )
                return
            }
            Task { [self] in
                do {
                    try await object.setProperty(interface: iface.name, name: name, value: value)
                    reply(target, values: [])
                } catch let error as DBusError {
                    reply(target, error: error)
                } catch {
                    reply(target, error: .failed(String(describing: error)))
                }
            }
        }
    }

    /// Answers from the connection thread itself: straight into libdbus's outgoing queue,
    /// without the command queue and its wake-up.
    private func reply(_ target: ReplyTarget, _ result: Result<[DBusValue], DBusError>) {
        guard !target.noReply else { return }
        do {
            switch result {
            case .success(let values):
                sendFromLoopThread(try MessageBuilder.methodReturn(to: target, arguments: values))
            case .failure(let error): sendFromLoopThread(try MessageBuilder.error(to: target, error))
            }
        } catch {
            logger.error("Cannot build reply", metadata: ["error": "\(error)"])
            if case .success = result { reply(target, .failure(.failed("Cannot build reply: \(error.message)"))) }
        }
    }

    /// Sends a copy of a prepared method return, from the connection thread.
    private func replyPrepared(_ target: ReplyTarget, _ prepared: DBusPreparedReply) {
        guard !target.noReply else { return }
        do {
            sendFromLoopThread(try MessageBuilder.methodReturn(to: target, prepared: prepared))
        } catch {
            logger.error("Cannot build reply", metadata: ["error": "\(error)"])
            reply(target, .failure(.failed("Cannot build reply: \(error.message)")))
        }
    }

    /// Sends a method return (from any thread).
    func reply(_ target: ReplyTarget, values: [DBusValue]) {
        guard !target.noReply else { return }
        do {
            send(try MessageBuilder.methodReturn(to: target, arguments: values))
        } catch {
            logger.error("Cannot build reply", metadata: ["error": "\(error)"])
            reply(target, error: .failed("Cannot build reply: \(error.message)"))
        }
    }

    /// Sends an error reply (from any thread).
    func reply(_ target: ReplyTarget, error: DBusError) {
        guard !target.noReply else { return }
        do {
            send(try MessageBuilder.error(to: target, error))
        } catch {
            logger.error("Cannot build error reply", metadata: ["error": "\(error)"])
        }
    }
}
