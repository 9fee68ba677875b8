/* SPDX-License-Identifier: MIT */
/*
 * ccurl.c - libcurl, opened with dlopen on first use; see ccurl.h.
 */
#include "ccurl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* The soname of libcurl's ABI 4 (Debian's libcurl4, Fedora's libcurl, ...). */
#define CCURL_LIBRARY "libcurl.so.4"

static struct {
    CURLcode (*global_init)(long flags);
    void (*global_cleanup)(void);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *);
    CURLMcode (*multi_wakeup)(CURLM *);
    CURLMcode (*multi_perform)(CURLM *, int *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned int, int, int *);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    CURL *(*easy_init)(void);
    void (*easy_reset)(CURL *);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} api;

/* Guards the fields below: libcurl is loaded while anyone holds it (ccurl_load), and unloaded
 * when the last holder lets it go (ccurl_unload). */
static pthread_mutex_t guard = PTHREAD_MUTEX_INITIALIZER;
static void *library;
static unsigned holders;
static char failure[512];

/* Opens and initialises libcurl; NULL on success, else why not. Under guard. */
static const char *load(void) {
    library = dlopen(CCURL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *why = dlerror();
        snprintf(failure, sizeof failure, "cannot load libcurl (%s); install it (Debian: apt install libcurl4)",
                 why ? why : CCURL_LIBRARY);
        return failure;
    }
#define CCURL_RESOLVE(field, name)                                                                  \
    do {                                                                                            \
        *(void **)&api.field = dlsym(library, name);                                                \
        if (api.field == NULL) {                                                                    \
            snprintf(failure, sizeof failure, "%s has no %s: libcurl 7.85 or later is required",    \
                     CCURL_LIBRARY, name);                                                          \
            dlclose(library);                                                                       \
            library = NULL;                                                                         \
            return failure;                                                                         \
        }                                                                                           \
    } while (0)
    CCURL_RESOLVE(global_init, "curl_global_init");
    CCURL_RESOLVE(global_cleanup, "curl_global_cleanup");
    CCURL_RESOLVE(multi_init, "curl_multi_init");
    CCURL_RESOLVE(multi_cleanup, "curl_multi_cleanup");
    CCURL_RESOLVE(multi_wakeup, "curl_multi_wakeup");
    CCURL_RESOLVE(multi_perform, "curl_multi_perform");
    CCURL_RESOLVE(multi_info_read, "curl_multi_info_read");
    CCURL_RESOLVE(multi_poll, "curl_multi_poll");
    CCURL_RESOLVE(multi_add_handle, "curl_multi_add_handle");
    CCURL_RESOLVE(multi_remove_handle, "curl_multi_remove_handle");
    CCURL_RESOLVE(multi_setopt, "curl_multi_setopt");
    CCURL_RESOLVE(easy_init, "curl_easy_init");
    CCURL_RESOLVE(easy_reset, "curl_easy_reset");
    CCURL_RESOLVE(easy_cleanup, "curl_easy_cleanup");
    CCURL_RESOLVE(easy_strerror, "curl_easy_strerror");
    CCURL_RESOLVE(easy_setopt, "curl_easy_setopt");
    CCURL_RESOLVE(easy_getinfo, "curl_easy_getinfo");
    CCURL_RESOLVE(slist_append, "curl_slist_append");
    CCURL_RESOLVE(slist_free_all, "curl_slist_free_all");
#undef CCURL_RESOLVE
    CURLcode code = api.global_init(CURL_GLOBAL_DEFAULT);
    if (code != CURLE_OK) {
        snprintf(failure, sizeof failure, "curl_global_init failed (libcurl error %d)", (int)code);
        dlclose(library);
        library = NULL;
        return failure;
    }
    return NULL;
}

const char *ccurl_load(void) {
    pthread_mutex_lock(&guard);
    const char *why = holders > 0 ? NULL : load();
    if (why == NULL) holders++;
    pthread_mutex_unlock(&guard);
    return why;
}

void ccurl_unload(void) {
    pthread_mutex_lock(&guard);
    if (holders > 0 && --holders == 0 && library != NULL) {
        api.global_cleanup();
        dlclose(library);
        library = NULL;
    }
    pthread_mutex_unlock(&guard);
}

CURLM *ccurl_multi_init(void) { return api.multi_init(); }
CURLMcode ccurl_multi_cleanup(CURLM *multi) { return api.multi_cleanup(multi); }
CURLMcode ccurl_multi_wakeup(CURLM *multi) { return api.multi_wakeup(multi); }
CURLMcode ccurl_multi_perform(CURLM *multi, int *running) { return api.multi_perform(multi, running); }
CURLMsg *ccurl_multi_info_read(CURLM *multi, int *queued) { return api.multi_info_read(multi, queued); }
CURLMcode ccurl_multi_poll(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout_ms, int *ready) {
    return api.multi_poll(multi, extra, count, timeout_ms, ready);
}
CURLMcode ccurl_multi_add_handle(CURLM *multi, CURL *easy) { return api.multi_add_handle(multi, easy); }
CURLMcode ccurl_multi_remove_handle(CURLM *multi, CURL *easy) { return api.multi_remove_handle(multi, easy); }
CURL *ccurl_easy_init(void) { return api.easy_init(); }
void ccurl_easy_reset(CURL *easy) { api.easy_reset(easy); }
void ccurl_easy_cleanup(CURL *easy) { api.easy_cleanup(easy); }
const char *ccurl_easy_strerror(CURLcode code) { return api.easy_strerror(code); }
struct curl_slist *ccurl_slist_append(struct curl_slist *list, const char *line) { return api.slist_append(list, line); }
void ccurl_slist_free_all(struct curl_slist *list) { api.slist_free_all(list); }

CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return api.easy_setopt(handle, option, value);
}

CURLcode ccurl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return api.easy_setopt(handle, option, value);
}

CURLcode ccurl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return api.easy_setopt(handle, option, value);
}

CURLcode ccurl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return api.easy_setopt(handle, option, value);
}

CURLcode ccurl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return api.easy_setopt(handle, option, value);
}

CURLcode ccurl_easy_setopt_write_function(CURL *handle, CURLoption option, curl_write_callback value) {
    return api.easy_setopt(handle, option, value);
}

CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *out) {
    return api.easy_getinfo(handle, info, out);
}

CURLcode ccurl_easy_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *out) {
    return api.easy_getinfo(handle, info, out);
}

CURLcode ccurl_easy_getinfo_string(CURL *handle, CURLINFO info, char **out) {
    return api.easy_getinfo(handle, info, out);
}

CURLcode ccurl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **out) {
    return api.easy_getinfo(handle, info, out);
}

CURLMcode ccurl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return api.multi_setopt(handle, option, value);
}
