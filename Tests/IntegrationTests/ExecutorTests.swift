import Foundation
import TestSupport
import Testing

/// brokerd's tasks run on its own executor (TaskPool), installed through the Swift runtime's
/// experimental executor factory: a toolchain whose runtime stops asking the factory would run
/// them on libdispatch again, whose pool monitor wakes the process every second. This is where
/// such an upgrade fails: brokerd checks from inside its first task, and its threads are TaskPool's.
/// Real brokerd (its log at debug level), idp-sim and brokerctl.
@Suite("brokerd's executor")
struct ExecutorTests {
    /// The names of the threads of process `pid`, as /proc shows them.
    static func threadNames(_ pid: Int32) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task").map {
            try String(contentsOfFile: "/proc/\(pid)/task/\($0)/comm", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    @Test("brokerd's tasks and sleeps run on TaskPool's threads, and it says so at start")
    func tasksRunOnTaskPool() async throws {
        let env = try await offThePool { try BrokerEnvironment() }
        let brokerd = env.brokerd.process
        let line = try await offThePool {
            try brokerd.waitForLine(timeout: .seconds(10), stderr: true) {
                $0.contains("tasks run on TaskPool's threads") || $0.contains("does not run brokerd's tasks")
            }
        }
        #expect(line.contains("tasks run on TaskPool's threads"), "\(line)")
        // Work that suspends and sleeps (a sign-in, a token), then the threads that did it.
        #expect(try await offThePool { try env.signIn(TestUsers.alice, client: "mail-app") }.status == 0)
        let token = try env.brokerctl(["token", "--client-id", "mail-app", "--scope", "User.Read"])
        #expect(token.status == 0, "\(token.stderr)")
        let names = try Self.threadNames(brokerd.pid)
        #expect(names.filter { $0 == "taskpool" }.count >= 4, "\(names)")
        #expect(names.filter { $0 == "taskpool-timer" }.count == 1, "\(names)")
        let refused = brokerd.stderrLines.filter { $0.contains("does not run brokerd's tasks") }
        #expect(refused.isEmpty, "\(refused)")
    }
}
