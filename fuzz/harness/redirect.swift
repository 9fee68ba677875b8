// The browser's redirect to the loopback listener (LoopbackRedirectListener.swift): the query
// string of `GET /?code=...&state=...`, decoded by FormDecoding (also used for form bodies). Any
// local process can connect to that port while an interactive sign-in waits, so its request is
// outside data. What the provider's encoder (HTTPRequest.percentEncode) writes must decode back
// to exactly what was encoded.
import HTTP

@testable import Identity

func fuzzOne(_ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    let parameters = FormDecoding.decode(text)
    for (key, _) in parameters where key.isEmpty { violated("an empty parameter name was kept") }
    _ = FormDecoding.percentDecode(text)
    let encoded = HTTPRequest.percentEncode(text)
    if FormDecoding.percentDecode(encoded) != text { violated("percent-encoding does not decode back") }
    if FormDecoding.decode("code=" + encoded + "&state=s")["code"] != text {
        violated(
            "a form value does not decode "
                + "back")
    }
}
