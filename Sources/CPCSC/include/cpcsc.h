/* SPDX-License-Identifier: MIT */
/*
 * cpcsc.h - the few whole PC/SC operations a badge reader needs, libpcsclite loaded on first use.
 *
 * libpcsclite is not linked: the first cpcsc_establish() opens libpcsclite.so.1 with dlopen and
 * resolves the functions used, so a program that links this target loads nothing of it until it
 * looks for a reader. Building needs the headers only (Debian: libpcsclite-dev); running, pcscd
 * and libpcsclite1.
 *
 * Every function returns a PC/SC result code (0, SCARD_S_SUCCESS, on success); cpcsc_describe()
 * gives pcsc-lite's text for one. The header is self-contained (plain C types), so Swift imports
 * it without pcsc-lite's headers.
 */
#ifndef CPCSC_H
#define CPCSC_H

#include <stddef.h>
#include <stdint.h>

/* Results a caller acts on (the values of pcsc-lite's SCARD_* codes). */
#define CPCSC_OK 0x00000000u
#define CPCSC_E_CANCELLED 0x80100002u
#define CPCSC_E_TIMEOUT 0x8010000Au
#define CPCSC_E_NO_SMARTCARD 0x8010000Cu
#define CPCSC_E_UNKNOWN_READER 0x80100009u
#define CPCSC_E_READER_UNAVAILABLE 0x80100017u
#define CPCSC_E_NO_SERVICE 0x8010001Du
#define CPCSC_E_SERVICE_STOPPED 0x8010001Eu
#define CPCSC_F_COMM_ERROR 0x80100013u
#define CPCSC_E_NO_READERS_AVAILABLE 0x8010002Eu
#define CPCSC_W_REMOVED_CARD 0x80100069u
#define CPCSC_E_INSUFFICIENT_BUFFER 0x80100008u
/* This shim's own: libpcsclite could not be loaded (cpcsc_load_failure() says why). */
#define CPCSC_E_NOT_LOADED 0x8010FF01u
/* This shim's own: the card's answer to Get Data was shorter than its status word. */
#define CPCSC_E_MALFORMED 0x8010FF02u

/* Reader state bits (SCARD_STATE_*). */
#define CPCSC_STATE_CHANGED 0x0002u
#define CPCSC_STATE_UNKNOWN 0x0004u
#define CPCSC_STATE_UNAVAILABLE 0x0008u
#define CPCSC_STATE_EMPTY 0x0010u
#define CPCSC_STATE_PRESENT 0x0020u
#define CPCSC_STATE_MUTE 0x0200u

/* The pseudo reader whose changes are readers appearing and disappearing. */
#define CPCSC_PNP_NOTIFICATION "\\\\?PnP?\\Notification"

typedef struct cpcsc cpcsc;

/* Whether libpcsclite has been loaded into this process (it stays loaded once it has). */
int cpcsc_is_loaded(void);

/* Why loading libpcsclite failed, after a cpcsc_establish() that returned CPCSC_E_NOT_LOADED; else NULL. */
const char *cpcsc_load_failure(void);

/* Establishes a context with pcscd (SCARD_SCOPE_SYSTEM). CPCSC_E_NO_SERVICE: pcscd is not running. */
uint32_t cpcsc_establish(cpcsc **out);

/* Cancels a cpcsc_wait() running on another thread (it returns CPCSC_E_CANCELLED). */
uint32_t cpcsc_cancel(cpcsc *context);

/* Releases the context; NULL is ignored. No cpcsc_wait() may be running on it. */
void cpcsc_release(cpcsc *context);

/* The readers' names, each ended by a NUL, the list by a second one (`*length` counts both).
 * No reader is success with an empty list (length 1). CPCSC_E_INSUFFICIENT_BUFFER: `capacity`
 * is too small. */
uint32_t cpcsc_list_readers(cpcsc *context, char *names, size_t capacity, size_t *length);

/* Waits at most `timeout_ms` for a change in the `count` readers named in `names` (each ended by
 * a NUL; CPCSC_PNP_NOTIFICATION among them to see readers come and go). `states` holds the
 * state the caller knows for each (0 at first) and receives the new one (CPCSC_STATE_* bits; the
 * high 16 bits of the pseudo reader's count the readers). CPCSC_E_TIMEOUT: nothing changed. */
uint32_t cpcsc_wait(cpcsc *context, const char *names, uint32_t *states, size_t count, uint32_t timeout_ms);

/* Connects to the card in `reader` (shared), sends the PC/SC part 3 Get Data for the UID
 * (FF CA 00 00 00) and disconnects, leaving the card as it was. On success `*status` is the
 * card's status word (0x9000: `uid` holds `*length` bytes; anything else: no UID). */
uint32_t cpcsc_read_uid(cpcsc *context, const char *reader, uint8_t *uid, size_t capacity, size_t *length,
                        uint16_t *status);

/* pcsc-lite's text for a result code (a static string). */
const char *cpcsc_describe(uint32_t result);

#endif
