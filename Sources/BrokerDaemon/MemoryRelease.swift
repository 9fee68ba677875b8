import CProcessMemory
import HTTP
import Logging

/// What a burst of work leaves in brokerd's memory, given back once the work is over.
///
/// brokerd's HTTP client lets libcurl go after a minute without a request (the libraries only it
/// needed are unmapped); then the heap's free memory goes back to the kernel and the pages of
/// code the start and the burst touched, and no longer touch, leave the process's page tables
/// (they stay in the page cache, and fault back in at their next use), while the loader's lock
/// keeps any library from being loaded meanwhile. So an idle
/// broker's resident memory is what it keeps, not what it once ran. Nothing is polled: the
/// release is the HTTP client's own idle timer.
enum MemoryRelease {
    static func installAfterHTTPBursts(logger: Logger) {
        HTTPClient.whenLibcurlUnloaded(cpm_release_untouched_code)
        HTTPClient.whenIdleReleased {
            logger.debug(
                "idle: libcurl unloaded, untouched pages released",
                metadata: ["kib": "\(cpm_last_released() / 1024)"])
        }
    }
}
