import DBus
import Testing

@Suite("Latency", .timeLimit(.minutes(1)))
struct LatencyTests {
    /// Sequential round trips between two connections; prints the mean (informative, loose bound).
    @Test func sequentialRoundTrips() async throws {
        try await withBus { bus in
            let server = try bus.connect()
            let client = try bus.connect()
            defer {
                server.close()
                client.close()
            }
            server.export(TestObject(), at: "/bench")
            let dest = server.uniqueName
            for _ in 0..<50 {
                _ = try await client.call(
                    destination: dest, path: "/bench", interface: TestObject.interfaceName,
                    member: "Add", arguments: [.int32(1), .int32(2)])
            }
            let count = 2000
            let start = ContinuousClock.now
            for i in 0..<count {
                let r = try await client.call(
                    destination: dest, path: "/bench", interface: TestObject.interfaceName,
                    member: "Add", arguments: [.int32(Int32(i)), .int32(1)])
                #expect(r == [.int32(Int32(i) + 1)])
            }
            let elapsed = ContinuousClock.now - start
            let micros = Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12
            print("DBus round trip: \(Int(micros / Double(count))) us mean over \(count) calls")
            #expect(elapsed < .seconds(30))
        }
    }
}
