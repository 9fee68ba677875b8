/*
 * ccurl.h - a thin shim over libcurl for Swift.
 *
 * Swift cannot call C variadic functions, so curl_easy_setopt,
 * curl_easy_getinfo and curl_multi_setopt get one typed wrapper per
 * argument type. Macros and union members that do not import are exposed
 * as functions. No logic lives here.
 */
#ifndef CCURL_H
#define CCURL_H

#include <curl/curl.h>

/* curl_easy_setopt, one wrapper per argument type */

static inline CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ccurl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ccurl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ccurl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ccurl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}

/* CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION share this signature. */
static inline CURLcode ccurl_easy_setopt_write_function(CURL *handle, CURLoption option, curl_write_callback value) {
    return curl_easy_setopt(handle, option, value);
}

/* curl_easy_getinfo, one wrapper per result type */

static inline CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *out) {
    return curl_easy_getinfo(handle, info, out);
}

static inline CURLcode ccurl_easy_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *out) {
    return curl_easy_getinfo(handle, info, out);
}

static inline CURLcode ccurl_easy_getinfo_string(CURL *handle, CURLINFO info, char **out) {
    return curl_easy_getinfo(handle, info, out);
}

static inline CURLcode ccurl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **out) {
    return curl_easy_getinfo(handle, info, out);
}

/* curl_multi_setopt */

static inline CURLMcode ccurl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}

/* CURLMsg: the union member does not import cleanly */

static inline CURL *ccurl_msg_easy_handle(const CURLMsg *msg) {
    return msg->easy_handle;
}

static inline CURLcode ccurl_msg_result(const CURLMsg *msg) {
    return msg->data.result;
}

/* Macros that do not import */

static inline long ccurl_global_default(void) {
    return CURL_GLOBAL_DEFAULT;
}

static inline int ccurl_error_size(void) {
    return CURL_ERROR_SIZE;
}

#endif /* CCURL_H */
