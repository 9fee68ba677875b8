/* SPDX-License-Identifier: MIT */
/*
 * ccurl.h - a thin shim over libcurl for Swift, loaded on first use.
 *
 * libcurl is not linked: ccurl_load() opens libcurl.so.4 with dlopen when nobody holds it
 * and resolves the few functions below, so a process that makes no HTTP request never loads
 * libcurl and what it pulls in (OpenSSL, GnuTLS, LDAP, Kerberos, ...), and one that made its
 * requests can let them go (ccurl_unload). Every other ccurl_ function may be called only
 * between a ccurl_load() that returned NULL and its ccurl_unload().
 *
 * Swift cannot call C variadic functions, so curl_easy_setopt, curl_easy_getinfo and
 * curl_multi_setopt get one typed wrapper per argument type. Macros and union members
 * that do not import are exposed as functions. No logic lives here.
 *
 * The types and constants are libcurl's own (curl/curl.h); call the ccurl_ functions,
 * never the curl_ ones (they are not linked).
 */
#ifndef CCURL_H
#define CCURL_H

#include <curl/curl.h>

/* Holds libcurl: loads it and runs curl_global_init unless it is held already (thread-safe).
 * NULL on success; otherwise why libcurl is unusable, and nothing is held. */
const char *ccurl_load(void);

/* Lets go of what ccurl_load() held; the last holder's curl_global_cleanup and dlclose unload
 * libcurl and the libraries only it needed. Every handle must be cleaned up before. */
void ccurl_unload(void);

/* The libcurl functions used, once loaded */

CURLM *ccurl_multi_init(void);
CURLMcode ccurl_multi_cleanup(CURLM *multi);
CURLMcode ccurl_multi_wakeup(CURLM *multi);
CURLMcode ccurl_multi_perform(CURLM *multi, int *running);
CURLMsg *ccurl_multi_info_read(CURLM *multi, int *queued);
CURLMcode ccurl_multi_poll(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout_ms, int *ready);
CURLMcode ccurl_multi_add_handle(CURLM *multi, CURL *easy);
CURLMcode ccurl_multi_remove_handle(CURLM *multi, CURL *easy);
CURL *ccurl_easy_init(void);
void ccurl_easy_reset(CURL *easy);
void ccurl_easy_cleanup(CURL *easy);
const char *ccurl_easy_strerror(CURLcode code);
struct curl_slist *ccurl_slist_append(struct curl_slist *list, const char *line);
void ccurl_slist_free_all(struct curl_slist *list);

/* curl_easy_setopt, one wrapper per argument type */

CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode ccurl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value);
CURLcode ccurl_easy_setopt_string(CURL *handle, CURLoption option, const char *value);
CURLcode ccurl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value);
CURLcode ccurl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value);
/* CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION share this signature. */
CURLcode ccurl_easy_setopt_write_function(CURL *handle, CURLoption option, curl_write_callback value);

/* curl_easy_getinfo, one wrapper per result type */

CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *out);
CURLcode ccurl_easy_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *out);
CURLcode ccurl_easy_getinfo_string(CURL *handle, CURLINFO info, char **out);
CURLcode ccurl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **out);

/* curl_multi_setopt */

CURLMcode ccurl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);

/* CURLMsg: the union member does not import cleanly */

static inline CURL *ccurl_msg_easy_handle(const CURLMsg *msg) {
    return msg->easy_handle;
}

static inline CURLcode ccurl_msg_result(const CURLMsg *msg) {
    return msg->data.result;
}

/* Macros that do not import */

static inline int ccurl_error_size(void) {
    return CURL_ERROR_SIZE;
}

#endif /* CCURL_H */
