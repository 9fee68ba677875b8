/* SPDX-License-Identifier: MIT */
/*
 * cpcsc.c - PC/SC operations over libpcsclite, opened with dlopen on first use; see cpcsc.h.
 */
#include "cpcsc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <winscard.h>

_Static_assert(CPCSC_E_CANCELLED == (uint32_t)SCARD_E_CANCELLED, "SCARD_E_CANCELLED");
_Static_assert(CPCSC_E_TIMEOUT == (uint32_t)SCARD_E_TIMEOUT, "SCARD_E_TIMEOUT");
_Static_assert(CPCSC_E_NO_SMARTCARD == (uint32_t)SCARD_E_NO_SMARTCARD, "SCARD_E_NO_SMARTCARD");
_Static_assert(CPCSC_E_UNKNOWN_READER == (uint32_t)SCARD_E_UNKNOWN_READER, "SCARD_E_UNKNOWN_READER");
_Static_assert(CPCSC_E_READER_UNAVAILABLE == (uint32_t)SCARD_E_READER_UNAVAILABLE, "SCARD_E_READER_UNAVAILABLE");
_Static_assert(CPCSC_E_NO_SERVICE == (uint32_t)SCARD_E_NO_SERVICE, "SCARD_E_NO_SERVICE");
_Static_assert(CPCSC_E_SERVICE_STOPPED == (uint32_t)SCARD_E_SERVICE_STOPPED, "SCARD_E_SERVICE_STOPPED");
_Static_assert(CPCSC_F_COMM_ERROR == (uint32_t)SCARD_F_COMM_ERROR, "SCARD_F_COMM_ERROR");
_Static_assert(CPCSC_E_NO_READERS_AVAILABLE == (uint32_t)SCARD_E_NO_READERS_AVAILABLE, "SCARD_E_NO_READERS");
_Static_assert(CPCSC_W_REMOVED_CARD == (uint32_t)SCARD_W_REMOVED_CARD, "SCARD_W_REMOVED_CARD");
_Static_assert(CPCSC_E_INSUFFICIENT_BUFFER == (uint32_t)SCARD_E_INSUFFICIENT_BUFFER, "SCARD_E_INSUFFICIENT_BUFFER");
_Static_assert(CPCSC_STATE_CHANGED == SCARD_STATE_CHANGED, "SCARD_STATE_CHANGED");
_Static_assert(CPCSC_STATE_UNKNOWN == SCARD_STATE_UNKNOWN, "SCARD_STATE_UNKNOWN");
_Static_assert(CPCSC_STATE_UNAVAILABLE == SCARD_STATE_UNAVAILABLE, "SCARD_STATE_UNAVAILABLE");
_Static_assert(CPCSC_STATE_EMPTY == SCARD_STATE_EMPTY, "SCARD_STATE_EMPTY");
_Static_assert(CPCSC_STATE_PRESENT == SCARD_STATE_PRESENT, "SCARD_STATE_PRESENT");
_Static_assert(CPCSC_STATE_MUTE == SCARD_STATE_MUTE, "SCARD_STATE_MUTE");

/* pcsc-lite's client library; its soname has been .so.1 since 1.0. */
static const char library[] = "libpcsclite.so.1";

static struct {
    LONG (*establish)(DWORD, LPCVOID, LPCVOID, LPSCARDCONTEXT);
    LONG (*release)(SCARDCONTEXT);
    LONG (*list_readers)(SCARDCONTEXT, LPCSTR, LPSTR, LPDWORD);
    LONG (*get_status_change)(SCARDCONTEXT, DWORD, SCARD_READERSTATE *, DWORD);
    LONG (*connect)(SCARDCONTEXT, LPCSTR, DWORD, DWORD, LPSCARDHANDLE, LPDWORD);
    LONG (*transmit)(SCARDHANDLE, const SCARD_IO_REQUEST *, LPCBYTE, DWORD, SCARD_IO_REQUEST *, LPBYTE, LPDWORD);
    LONG (*disconnect)(SCARDHANDLE, DWORD);
    LONG (*cancel)(SCARDCONTEXT);
    const char *(*stringify)(LONG);
} api;

/* Guards loading: once loaded, libpcsclite stays (it keeps a thread-local map of contexts). */
static pthread_mutex_t guard = PTHREAD_MUTEX_INITIALIZER;
static void *handle;
static int loaded;
static char failure[512];

struct cpcsc {
    SCARDCONTEXT context;
};

int cpcsc_is_loaded(void) {
    pthread_mutex_lock(&guard);
    int result = loaded;
    pthread_mutex_unlock(&guard);
    return result;
}

const char *cpcsc_load_failure(void) {
    pthread_mutex_lock(&guard);
    const char *result = loaded || failure[0] == 0 ? NULL : failure;
    pthread_mutex_unlock(&guard);
    return result;
}

/* Opens libpcsclite; 1 on success, else 0 with `failure` set. Under guard. */
static int load(void) {
    handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(failure, sizeof failure, "cannot load %s (%s); install pcsc-lite (Debian: apt install libpcsclite1 pcscd)",
                 library, why ? why : "not found");
        return 0;
    }
#define CPCSC_RESOLVE(field, name)                                                                  \
    do {                                                                                            \
        *(void **)&api.field = dlsym(handle, name);                                                 \
        if (api.field == NULL) {                                                                    \
            snprintf(failure, sizeof failure, "%s has no %s: pcsc-lite 1.8 or later is required",  \
                     library, name);                                                                \
            dlclose(handle);                                                                        \
            handle = NULL;                                                                          \
            return 0;                                                                               \
        }                                                                                           \
    } while (0)
    CPCSC_RESOLVE(establish, "SCardEstablishContext");
    CPCSC_RESOLVE(release, "SCardReleaseContext");
    CPCSC_RESOLVE(list_readers, "SCardListReaders");
    CPCSC_RESOLVE(get_status_change, "SCardGetStatusChange");
    CPCSC_RESOLVE(connect, "SCardConnect");
    CPCSC_RESOLVE(transmit, "SCardTransmit");
    CPCSC_RESOLVE(disconnect, "SCardDisconnect");
    CPCSC_RESOLVE(cancel, "SCardCancel");
    CPCSC_RESOLVE(stringify, "pcsc_stringify_error");
#undef CPCSC_RESOLVE
    return 1;
}

uint32_t cpcsc_establish(cpcsc **out) {
    *out = NULL;
    pthread_mutex_lock(&guard);
    if (!loaded) loaded = load();
    int ready = loaded;
    pthread_mutex_unlock(&guard);
    if (!ready) return CPCSC_E_NOT_LOADED;
    cpcsc *made = calloc(1, sizeof *made);
    if (made == NULL) return (uint32_t)SCARD_E_NO_MEMORY;
    LONG rc = api.establish(SCARD_SCOPE_SYSTEM, NULL, NULL, &made->context);
    if (rc != SCARD_S_SUCCESS) {
        free(made);
        return (uint32_t)rc;
    }
    *out = made;
    return CPCSC_OK;
}

uint32_t cpcsc_cancel(cpcsc *context) {
    if (context == NULL) return CPCSC_OK;
    return (uint32_t)api.cancel(context->context);
}

void cpcsc_release(cpcsc *context) {
    if (context == NULL) return;
    api.release(context->context);
    free(context);
}

uint32_t cpcsc_list_readers(cpcsc *context, char *names, size_t capacity, size_t *length) {
    *length = 0;
    if (capacity < 2) return CPCSC_E_INSUFFICIENT_BUFFER;
    DWORD size = capacity > 0xFFFFFFFFu ? 0xFFFFFFFFu : (DWORD)capacity;
    LONG rc = api.list_readers(context->context, NULL, names, &size);
    if (rc == SCARD_E_NO_READERS_AVAILABLE) {
        names[0] = 0;
        names[1] = 0;
        *length = 1;
        return CPCSC_OK;
    }
    if (rc != SCARD_S_SUCCESS) return (uint32_t)rc;
    *length = size;
    return CPCSC_OK;
}

/* More readers than one badge reader's desk ever has; the rest are not watched. */
#define MAX_WATCHED 16

uint32_t cpcsc_wait(cpcsc *context, const char *names, uint32_t *states, size_t count, uint32_t timeout_ms) {
    if (count == 0 || count > MAX_WATCHED) return (uint32_t)SCARD_E_INVALID_PARAMETER;
    SCARD_READERSTATE readers[MAX_WATCHED];
    memset(readers, 0, sizeof readers);
    const char *name = names;
    for (size_t i = 0; i < count; i++) {
        readers[i].szReader = name;
        readers[i].dwCurrentState = states[i];
        name += strlen(name) + 1;
    }
    LONG rc = api.get_status_change(context->context, timeout_ms, readers, (DWORD)count);
    if (rc == SCARD_S_SUCCESS)
        for (size_t i = 0; i < count; i++) states[i] = (uint32_t)readers[i].dwEventState;
    return (uint32_t)rc;
}

uint32_t cpcsc_read_uid(cpcsc *context, const char *reader, uint8_t *uid, size_t capacity, size_t *length,
                        uint16_t *status) {
    *length = 0;
    *status = 0;
    SCARDHANDLE card;
    DWORD protocol = 0;
    LONG rc = api.connect(context->context, reader, SCARD_SHARE_SHARED, SCARD_PROTOCOL_T0 | SCARD_PROTOCOL_T1, &card,
                          &protocol);
    if (rc != SCARD_S_SUCCESS) return (uint32_t)rc;
    /* PC/SC part 3, 3.2.2.1.3: Get Data, P1 = 00 the UID, Le = 00 all of it. */
    static const BYTE get_uid[] = {0xFF, 0xCA, 0x00, 0x00, 0x00};
    SCARD_IO_REQUEST send = {.dwProtocol = protocol, .cbPciLength = sizeof(SCARD_IO_REQUEST)};
    BYTE answer[258];
    DWORD answer_length = sizeof answer;
    rc = api.transmit(card, &send, get_uid, sizeof get_uid, NULL, answer, &answer_length);
    api.disconnect(card, SCARD_LEAVE_CARD);
    if (rc != SCARD_S_SUCCESS) return (uint32_t)rc;
    if (answer_length < 2) return CPCSC_E_MALFORMED;
    *status = (uint16_t)(answer[answer_length - 2] << 8 | answer[answer_length - 1]);
    size_t data = answer_length - 2;
    if (*status == 0x9000) {
        if (data > capacity) return CPCSC_E_INSUFFICIENT_BUFFER;
        memcpy(uid, answer, data);
        *length = data;
    }
    memset(answer, 0, sizeof answer);
    return CPCSC_OK;
}

const char *cpcsc_describe(uint32_t result) {
    if (result == CPCSC_E_NOT_LOADED) return "libpcsclite could not be loaded";
    if (result == CPCSC_E_MALFORMED) return "the card's answer was shorter than a status word";
    if (!cpcsc_is_loaded()) return "a PC/SC error";
    return api.stringify((LONG)result);
}
