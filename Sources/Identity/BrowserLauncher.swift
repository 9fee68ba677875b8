import Glibc

/// Opens a URL in the user's browser: `$BROWSER` when set (the convention: a colon-separated
/// list of commands, `%s` standing for the URL), `xdg-open` otherwise.
struct BrowserLauncher: Sendable {
    /// Starts the browser and returns without waiting for it; its exit is reaped in the background.
    func open(_ url: String) throws(IdentityError) {
        let command: [String]
        if let browser = getenv("BROWSER").map({ String(cString: $0) }), !browser.isEmpty,
            let first = browser.split(separator: ":").first
        {
            let words = first.split(separator: " ").map(String.init)
            command =
                words.contains { $0.contains("%s") }
                ? words.map { $0.replacing("%s", with: url) }
                : words + [url]
        } else {
            command = ["xdg-open", url]
        }
        var pid = pid_t()
        var arguments = command.map { strdup($0) } + [nil]
        defer { for argument in arguments { free(argument) } }
        let status = posix_spawnp(&pid, command[0], nil, nil, &arguments, environ)
        guard status == 0 else {
            throw IdentityError.badResponse(
                "cannot start the browser (\(command[0])): \(String(cString: strerror(status))); set BROWSER")
        }
        let child = pid
        Thread.detach {
            var code: Int32 = 0
            waitpid(child, &code, 0)
        }
    }
}

/// A fire-and-forget POSIX thread.
enum Thread {
    private final class Box: @unchecked Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    static func detach(_ body: @escaping @Sendable () -> Void) {
        var thread = pthread_t()
        let context = Unmanaged.passRetained(Box(body)).toOpaque()
        let created = pthread_create(
            &thread, nil,
            { raw in
                guard let raw else { return nil }
                Unmanaged<Box>.fromOpaque(raw).takeRetainedValue().body()
                return nil
            }, context)
        if created == 0 {
            pthread_detach(thread)
        } else {
            Unmanaged<Box>.fromOpaque(context).takeRetainedValue().body()
        }
    }
}
