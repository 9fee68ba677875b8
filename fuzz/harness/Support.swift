// What every harness shares. Each harness file defines `fuzzOne(_:)`; this file exports it to
// libFuzzer as LLVMFuzzerTestOneInput. Harnesses are built by fuzz/build.sh, run by fuzz/run.sh.
import BrokerCore
import Dispatch
import Logging

// libFuzzer's name for the entry point.
// swift-format-ignore: AlwaysUseLowerCamelCase
@_cdecl("LLVMFuzzerTestOneInput")
public func LLVMFuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    fuzzOne(bytes)
    return 0
}

/// Fails the run: libFuzzer saves the input as a crash artifact.
func violated(_ what: String, file: StaticString = #file, line: UInt = #line) -> Never {
    fatalError("fuzz invariant violated: \(what)", file: file, line: line)
}

/// Runs async code to completion from libFuzzer's (non-pool) thread.
func runBlocking<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task {
        box.value = await body()
        done.signal()
    }
    done.wait()
    return box.value!
}

private final class ResultBox<T>: @unchecked Sendable { var value: T? }

/// A clock that never moves: runs are reproducible.
struct FixedClock: WallClock {
    var seconds: Int64 = 1_750_000_000
    func now() -> Int64 { seconds }
}

/// Logs nothing: the harness's output is libFuzzer's.
let quietLogger = Logger(label: "fuzz", factory: { _ in SwiftLogNoOpLogHandler() })

/// Structured values drawn from the input's bytes (libFuzzer's FuzzedDataProvider, in small):
/// for harnesses that build a well-formed document around values the fuzzer picks bit by bit,
/// such as an Int64 at the edge of its range, which mutating JSON text rarely produces.
/// Past the end of the input every value is zero or empty.
struct FuzzedData {
    private(set) var rest: ArraySlice<UInt8>
    init<Bytes: Collection>(_ bytes: Bytes) where Bytes.Element == UInt8 { rest = ArraySlice(bytes) }

    mutating func byte() -> UInt8 { rest.popFirst() ?? 0 }
    mutating func bool() -> Bool { byte() & 1 == 1 }

    /// A byte picks the kind: a value at or near an edge of Int64 (where arithmetic on it breaks),
    /// a small one, or eight more bytes, little-endian.
    mutating func int64() -> Int64 {
        switch byte() {
        case 0: return .min
        case 1: return .max
        case 2: return .min + Int64(byte())
        case 3: return .max - Int64(byte())
        case 4: return Int64(Int8(bitPattern: byte()))
        default: break
        }
        var value: UInt64 = 0
        for shift in stride(from: 0, to: 64, by: 8) { value |= UInt64(byte()) << UInt64(shift) }
        return Int64(bitPattern: value)
    }

    /// One of `choices`, or (when the byte says so) a string of up to 255 bytes from the input.
    mutating func string(_ choices: [String]) -> String {
        let pick = Int(byte())
        if pick < choices.count * 8 || choices.isEmpty && pick < 128 {
            return choices.isEmpty ? "" : choices[pick % choices.count]
        }
        let length = Int(byte())
        var bytes: [UInt8] = []
        for _ in 0..<length { bytes.append(byte()) }
        return String(decoding: bytes, as: UTF8.self)
    }
}
