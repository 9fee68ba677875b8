import Testing

@testable import HTTP

@Suite("Encoding and helpers")
struct EncodingTests {
    @Test func percentEncodingKeepsOnlyUnreserved() {
        #expect(HTTPRequest.percentEncode("AZaz09-._~") == "AZaz09-._~")
        #expect(
            HTTPRequest.percentEncode(" !\"#$%&'()*+,/:;=?@[]")
                == "%20%21%22%23%24%25%26%27%28%29%2A%2B%2C%2F%3A%3B%3D%3F%40%5B%5D")
        #expect(HTTPRequest.percentEncode("é€") == "%C3%A9%E2%82%AC")
        #expect(HTTPRequest.percentEncode("") == "")
    }

    @Test func formEncodingJoinsInOrder() {
        #expect(HTTPRequest.formURLEncoded([("b", "2"), ("a", "1 1"), ("empty", "")]) == "b=2&a=1%201&empty=")
        #expect(HTTPRequest.formURLEncoded([]) == "")
        let request = HTTPRequest.postForm(
            "http://h/", fields: [("a", "b")],
            headers: [HTTPHeader("content-type", "application/x-www-form-urlencoded; charset=utf-8")])
        #expect(request.headers.count == 1)
        #expect(request.method == "POST")
        #expect(request.body == Array("a=b".utf8))
    }

    @Test func defaults() {
        let request = HTTPRequest.get("http://h/")
        #expect(request.connectTimeout == .seconds(5))
        #expect(request.timeout == .seconds(15))
        #expect(request.maxResponseBytes == 1 << 20)
        #expect(request.method == "GET")
    }

    @Test func urlRedaction() {
        #expect(URLParts("https://user:pw@Example.com:8443/a/b?q=1#f")?.redacted == "https://Example.com:8443/a/b")
        #expect(URLParts("https://user:pw@Example.com:8443/a/b?q=1#f")?.host == "Example.com")
        #expect(URLParts("HTTP://[::1]:80?x")?.redacted == "http://[::1]:80/")
        #expect(URLParts("HTTP://[::1]:80?x")?.host == "::1")
        #expect(URLParts("no scheme") == nil)
        #expect(URLParts.redact("secret?x") == "(URL without a scheme://, not shown)")
    }

    @Test func durationsAndTimeouts() {
        #expect(formatDuration(.milliseconds(300)) == "300 ms")
        #expect(formatDuration(.seconds(15)) == "15 s")
        #expect(formatDuration(.milliseconds(1500)) == "1.5 s")
        #expect(milliseconds(.zero, minimum: 1) == 1)
        #expect(milliseconds(.microseconds(1), minimum: 1) == 1)
        #expect(milliseconds(.milliseconds(-5), minimum: 1) == 1)
        #expect(milliseconds(.milliseconds(1500), minimum: 1) == 1500)
        #expect(milliseconds(.seconds(Int64.max), minimum: 1) == Int64(Int32.max))
    }

    @Test func errorDescriptionsAreActionable() {
        #expect(HTTPError.timedOut(.seconds(15)).description == "The HTTP request timed out after 15 s")
        #expect(HTTPError.unsupportedScheme("ftp").description.contains("only http and https"))
        #expect(HTTPError.couldNotResolve(host: "idp.example").description.contains("idp.example"))
        #expect(HTTPError.responseTooLarge(limit: 10).description.contains("10 bytes"))
    }
}
