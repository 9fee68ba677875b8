/* SPDX-License-Identifier: MIT */
/*
 * ctpm.h - a few whole TPM 2.0 operations over tpm2-tss's ESAPI, loaded on first use.
 *
 * libtss2 is not linked: the first ctpm_open() opens libtss2-esys.so.0, libtss2-tctildr.so.0,
 * libtss2-mu.so.0 and libtss2-rc.so.0 with dlopen and resolves the few functions used, so a
 * program that links this target loads nothing of tpm2-tss until it opens a TPM. Building needs
 * the headers only (Debian: libtss2-dev).
 *
 * Operations, not the ESAPI surface: each function below is one thing the broker does with a
 * TPM, with its templates fixed here (the TPM's structures are large unions Swift imports
 * poorly, and a template must not drift between the call that seals and the one that unseals).
 * Every function returns a TSS2_RC (0 on success); ctpm_kind() sorts one into what a caller
 * acts on, ctpm_decode() gives tpm2-tss's text for it.
 */
#ifndef CTPM_H
#define CTPM_H

#include <stddef.h>
#include <stdint.h>

/* What an operation's result means to a caller. */
typedef enum {
    CTPM_OK = 0,
    /* The authValue was wrong (TPM_RC_AUTH_FAIL, TPM_RC_BAD_AUTH); the lockout counter counted it. */
    CTPM_WRONG_AUTH = 1,
    /* The dictionary-attack lockout refuses every authorization until it recovers (TPM_RC_LOCKOUT). */
    CTPM_LOCKED_OUT = 2,
    /* The blob does not belong under this TPM's storage key (TPM_RC_INTEGRITY, ...): another TPM's,
     * or this one's before it was cleared. */
    CTPM_NOT_THIS_TPM = 3,
    /* The TCTI could not reach a TPM (no device, no permission, nothing listening). */
    CTPM_UNREACHABLE = 4,
    /* tpm2-tss could not be loaded (ctpm_load_failure() says why). */
    CTPM_NOT_LOADED = 5,
    /* The bytes handed in are no TPM2B_PUBLIC / TPM2B_PRIVATE, or too long. */
    CTPM_MALFORMED = 6,
    CTPM_OTHER = 7,
} ctpm_kind_t;

/* A TSS2_RC of this shim's own layer (tpm2-tss leaves layer 20 unused). */
#define CTPM_RC_NOT_LOADED 0x00140001u
#define CTPM_RC_MALFORMED 0x00140002u
#define CTPM_RC_TOO_SMALL 0x00140003u

typedef struct ctpm ctpm;

/* Whether tpm2-tss has been loaded into this process (it stays loaded once it has). */
int ctpm_is_loaded(void);

/* Why loading tpm2-tss failed, after a ctpm_open() that returned CTPM_RC_NOT_LOADED; else NULL. */
const char *ctpm_load_failure(void);

/* Opens the TPM the TCTI configuration names ("device:/dev/tpmrm0", "swtpm:host=...,port=...")
 * and creates the storage primary under the owner hierarchy (empty owner auth). */
uint32_t ctpm_open(const char *tcti, ctpm **out);

/* Flushes what the context holds and closes it; NULL is ignored. */
void ctpm_close(ctpm *tpm);

/* Seals `secret` (at most 128 bytes) under the storage primary, reachable with `auth` (at most
 * 32 bytes). Writes the marshalled TPM2B_PUBLIC and TPM2B_PRIVATE. */
uint32_t ctpm_seal(ctpm *tpm, const uint8_t *auth, size_t auth_len, const uint8_t *secret, size_t secret_len,
                   uint8_t *pub, size_t pub_cap, size_t *pub_len, uint8_t *priv, size_t priv_cap, size_t *priv_len);

/* Loads a sealed object and unseals it with `auth`; the secret goes to `out` (128 bytes suffice). */
uint32_t ctpm_unseal(ctpm *tpm, const uint8_t *auth, size_t auth_len, const uint8_t *pub, size_t pub_len,
                     const uint8_t *priv, size_t priv_len, uint8_t *out, size_t out_cap, size_t *out_len);

/* Sets the dictionary-attack parameters, authorized by the lockout hierarchy's (empty) auth. */
uint32_t ctpm_set_lockout(ctpm *tpm, uint32_t max_tries, uint32_t recovery_seconds, uint32_t lockout_recovery_seconds);

/* The lockout counter, the failures it tolerates and the seconds after which it forgets one
 * (TPM_PT_LOCKOUT_COUNTER, TPM_PT_MAX_AUTH_FAIL, TPM_PT_LOCKOUT_INTERVAL). */
uint32_t ctpm_lockout_state(ctpm *tpm, uint32_t *counter, uint32_t *max_tries, uint32_t *interval);

/* Creates an ECC P-256 signing key under the storage primary that never leaves the TPM (fixedTPM,
 * fixedParent, sensitiveDataOrigin), used with `auth`. Writes its public point (x and y, 32 bytes
 * each) and its marshalled blobs. */
uint32_t ctpm_create_signing_key(ctpm *tpm, const uint8_t *auth, size_t auth_len, uint8_t x[32], uint8_t y[32],
                                 uint8_t *pub, size_t pub_cap, size_t *pub_len, uint8_t *priv, size_t priv_cap,
                                 size_t *priv_len);

/* Signs a SHA-256 digest with a signing key's blobs: ECDSA, r and s of 32 bytes each. */
uint32_t ctpm_sign(ctpm *tpm, const uint8_t *auth, size_t auth_len, const uint8_t *pub, size_t pub_len,
                   const uint8_t *priv, size_t priv_len, const uint8_t digest[32], uint8_t signature[64]);

/* What a result means; see ctpm_kind_t. */
ctpm_kind_t ctpm_kind(uint32_t rc);

/* tpm2-tss's text for a result (Tss2_RC_Decode), or this shim's own. */
const char *ctpm_decode(uint32_t rc);

#endif /* CTPM_H */
