import Foundation
import TestSupport

/// brokerd's state as its files hold it, read by the test without going through the broker:
/// `state.json` with the changes of `state.journal` applied (each line replaces the top-level
/// keys it names, and the entries of `clients` and `accounts` it names; null removes), read
/// here independently of brokerd's own reader. The snapshot's `journal` id is left out, so the
/// result reads as a state file of its own.
enum StateOnDisk {
    /// The state in `directory`, or nil when there is no state file.
    static func json(in directory: String) throws -> [String: Any]? {
        let path = directory + "/state.json"
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        guard var object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw ProcessFailure(
                "\(path) (\(data.count) bytes) is not a JSON object: \(String(decoding: data, as: UTF8.self))")
        }
        let snapshot = object.removeValue(forKey: "journal") as? String
        guard let snapshot, let journal = FileManager.default.contents(atPath: directory + "/state.journal") else {
            return object
        }
        var lines = journal.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        // A last line without its newline was cut short: dropped, as brokerd drops it.
        lines.removeLast()
        for (index, line) in lines.enumerated() {
            guard let change = try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
                throw ProcessFailure("state.journal line \(index + 1) is not a JSON object")
            }
            if index == 0 {
                guard change["snapshot"] as? String == snapshot else { return object }
                continue
            }
            for (key, value) in change {
                if key == "clients" || key == "accounts", let entries = value as? [String: Any] {
                    var table = object[key] as? [String: Any] ?? [:]
                    for (name, entry) in entries { table[name] = entry is NSNull ? nil : entry }
                    object[key] = table
                } else {
                    object[key] = value is NSNull ? nil : value
                }
            }
        }
        return object
    }

    /// The text of both files, for a test that looks for a secret anywhere in them.
    static func text(in directory: String) -> String {
        ["/state.json", "/state.journal"].map {
            (try? String(contentsOfFile: directory + $0, encoding: .utf8)) ?? ""
        }.joined(separator: "\n")
    }
}

extension StateOnDisk {
    /// Both files' bytes, for a test that checks nothing was written.
    static func bytes(in directory: String) -> [Data?] {
        ["/state.json", "/state.journal"].map { FileManager.default.contents(atPath: directory + $0) }
    }
}
