/* SPDX-License-Identifier: MIT */
/*
 * ctpm.c - TPM 2.0 operations over ESAPI, tpm2-tss opened with dlopen on first use; see ctpm.h.
 */
#include "ctpm.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_tctildr.h>

/* The sonames of tpm2-tss 3.x (Debian 12: libtss2-esys-3.0.2-0, libtss2-tctildr0, libtss2-mu0,
 * libtss2-rc0), which have kept their ABI since 2.x. */
static const char *const libraries[] = {
    "libtss2-esys.so.0",
    "libtss2-tctildr.so.0",
    "libtss2-mu.so.0",
    "libtss2-rc.so.0",
};
#define LIBRARY_COUNT (sizeof libraries / sizeof libraries[0])

static struct {
    TSS2_RC (*tctildr_initialize)(const char *, TSS2_TCTI_CONTEXT **);
    void (*tctildr_finalize)(TSS2_TCTI_CONTEXT **);
    TSS2_RC (*initialize)(ESYS_CONTEXT **, TSS2_TCTI_CONTEXT *, TSS2_ABI_VERSION *);
    void (*finalize)(ESYS_CONTEXT **);
    void (*free)(void *);
    TSS2_RC (*flush_context)(ESYS_CONTEXT *, ESYS_TR);
    TSS2_RC (*tr_set_auth)(ESYS_CONTEXT *, ESYS_TR, const TPM2B_AUTH *);
    TSS2_RC (*start_auth_session)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, const TPM2B_NONCE *,
                                  TPM2_SE, const TPMT_SYM_DEF *, TPMI_ALG_HASH, ESYS_TR *);
    TSS2_RC (*trsess_set_attributes)(ESYS_CONTEXT *, ESYS_TR, TPMA_SESSION, TPMA_SESSION);
    TSS2_RC (*create_primary)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, const TPM2B_SENSITIVE_CREATE *,
                              const TPM2B_PUBLIC *, const TPM2B_DATA *, const TPML_PCR_SELECTION *, ESYS_TR *,
                              TPM2B_PUBLIC **, TPM2B_CREATION_DATA **, TPM2B_DIGEST **, TPMT_TK_CREATION **);
    TSS2_RC (*create)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, const TPM2B_SENSITIVE_CREATE *,
                      const TPM2B_PUBLIC *, const TPM2B_DATA *, const TPML_PCR_SELECTION *, TPM2B_PRIVATE **,
                      TPM2B_PUBLIC **, TPM2B_CREATION_DATA **, TPM2B_DIGEST **, TPMT_TK_CREATION **);
    TSS2_RC (*load)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, const TPM2B_PRIVATE *, const TPM2B_PUBLIC *,
                    ESYS_TR *);
    TSS2_RC (*unseal)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, TPM2B_SENSITIVE_DATA **);
    TSS2_RC (*sign)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, const TPM2B_DIGEST *, const TPMT_SIG_SCHEME *,
                    const TPMT_TK_HASHCHECK *, TPMT_SIGNATURE **);
    TSS2_RC (*dictionary_attack_parameters)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, ESYS_TR, UINT32, UINT32,
                                            UINT32);
    TSS2_RC (*get_capability)(ESYS_CONTEXT *, ESYS_TR, ESYS_TR, ESYS_TR, TPM2_CAP, UINT32, UINT32, TPMI_YES_NO *,
                              TPMS_CAPABILITY_DATA **);
    TSS2_RC (*public_marshal)(const TPM2B_PUBLIC *, uint8_t *, size_t, size_t *);
    TSS2_RC (*public_unmarshal)(const uint8_t *, size_t, size_t *, TPM2B_PUBLIC *);
    TSS2_RC (*private_marshal)(const TPM2B_PRIVATE *, uint8_t *, size_t, size_t *);
    TSS2_RC (*private_unmarshal)(const uint8_t *, size_t, size_t *, TPM2B_PRIVATE *);
    const char *(*rc_decode)(TSS2_RC);
} api;

/* Guards loading: once loaded, tpm2-tss stays (a TPM is opened rarely, and tpm2-tss's TCTI
 * modules are themselves dlopened by tctildr and do not unload cleanly). */
static pthread_mutex_t guard = PTHREAD_MUTEX_INITIALIZER;
static void *handles[LIBRARY_COUNT];
static int loaded;
static char failure[512];

struct ctpm {
    TSS2_TCTI_CONTEXT *tcti;
    ESYS_CONTEXT *esys;
    ESYS_TR primary;
};

int ctpm_is_loaded(void) {
    pthread_mutex_lock(&guard);
    int result = loaded;
    pthread_mutex_unlock(&guard);
    return result;
}

const char *ctpm_load_failure(void) {
    pthread_mutex_lock(&guard);
    const char *result = loaded || failure[0] == 0 ? NULL : failure;
    pthread_mutex_unlock(&guard);
    return result;
}

static void unload_partial(void) {
    for (size_t i = 0; i < LIBRARY_COUNT; i++) {
        if (handles[i] != NULL) dlclose(handles[i]);
        handles[i] = NULL;
    }
}

/* Opens tpm2-tss; 1 on success, else 0 with `failure` set. Under guard. */
static int load(void) {
    for (size_t i = 0; i < LIBRARY_COUNT; i++) {
        handles[i] = dlopen(libraries[i], RTLD_NOW | RTLD_LOCAL);
        if (handles[i] == NULL) {
            const char *why = dlerror();
            snprintf(failure, sizeof failure,
                     "cannot load %s (%s); install tpm2-tss (Debian: apt install libtss2-esys-3.0.2-0 "
                     "libtss2-tctildr0 libtss2-mu0 libtss2-rc0)",
                     libraries[i], why ? why : "not found");
            unload_partial();
            return 0;
        }
    }
#define CTPM_RESOLVE(library, field, name)                                                          \
    do {                                                                                            \
        *(void **)&api.field = dlsym(handles[library], name);                                       \
        if (api.field == NULL) {                                                                    \
            snprintf(failure, sizeof failure, "%s has no %s: tpm2-tss 2.4 or later is required",    \
                     libraries[library], name);                                                     \
            unload_partial();                                                                       \
            return 0;                                                                               \
        }                                                                                           \
    } while (0)
    CTPM_RESOLVE(0, initialize, "Esys_Initialize");
    CTPM_RESOLVE(0, finalize, "Esys_Finalize");
    CTPM_RESOLVE(0, free, "Esys_Free");
    CTPM_RESOLVE(0, flush_context, "Esys_FlushContext");
    CTPM_RESOLVE(0, tr_set_auth, "Esys_TR_SetAuth");
    CTPM_RESOLVE(0, start_auth_session, "Esys_StartAuthSession");
    CTPM_RESOLVE(0, trsess_set_attributes, "Esys_TRSess_SetAttributes");
    CTPM_RESOLVE(0, create_primary, "Esys_CreatePrimary");
    CTPM_RESOLVE(0, create, "Esys_Create");
    CTPM_RESOLVE(0, load, "Esys_Load");
    CTPM_RESOLVE(0, unseal, "Esys_Unseal");
    CTPM_RESOLVE(0, sign, "Esys_Sign");
    CTPM_RESOLVE(0, dictionary_attack_parameters, "Esys_DictionaryAttackParameters");
    CTPM_RESOLVE(0, get_capability, "Esys_GetCapability");
    CTPM_RESOLVE(1, tctildr_initialize, "Tss2_TctiLdr_Initialize");
    CTPM_RESOLVE(1, tctildr_finalize, "Tss2_TctiLdr_Finalize");
    CTPM_RESOLVE(2, public_marshal, "Tss2_MU_TPM2B_PUBLIC_Marshal");
    CTPM_RESOLVE(2, public_unmarshal, "Tss2_MU_TPM2B_PUBLIC_Unmarshal");
    CTPM_RESOLVE(2, private_marshal, "Tss2_MU_TPM2B_PRIVATE_Marshal");
    CTPM_RESOLVE(2, private_unmarshal, "Tss2_MU_TPM2B_PRIVATE_Unmarshal");
    CTPM_RESOLVE(3, rc_decode, "Tss2_RC_Decode");
#undef CTPM_RESOLVE
    return 1;
}

static int ensure_loaded(void) {
    pthread_mutex_lock(&guard);
    if (!loaded) loaded = load();
    int result = loaded;
    pthread_mutex_unlock(&guard);
    return result;
}

/* The storage primary: the TCG's ECC P-256 storage key template, the same key for the same owner
 * seed each time it is created (nothing is persisted in the TPM's NV). noDA: its auth is empty and
 * guessing it gains nothing, and during a lockout it must still load the sealed object, so that
 * the unseal is what the TPM refuses. */
static const TPM2B_PUBLIC primary_template = {
    .publicArea =
        {
            .type = TPM2_ALG_ECC,
            .nameAlg = TPM2_ALG_SHA256,
            .objectAttributes = TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT | TPMA_OBJECT_FIXEDTPM |
                                TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN |
                                TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA,
            .parameters.eccDetail =
                {
                    .symmetric = {.algorithm = TPM2_ALG_AES, .keyBits.aes = 128, .mode.aes = TPM2_ALG_CFB},
                    .scheme = {.scheme = TPM2_ALG_NULL},
                    .curveID = TPM2_ECC_NIST_P256,
                    .kdf = {.scheme = TPM2_ALG_NULL},
                },
            .unique.ecc = {.x = {.size = 32}, .y = {.size = 32}},
        },
};

/* Parameter encryption for the sessions below: the authValue and the secret cross the bus to the
 * TPM (an SPI/LPC bus on a real machine) encrypted, and the unsealed secret comes back encrypted. */
static const TPMT_SYM_DEF session_cipher = {
    .algorithm = TPM2_ALG_AES, .keyBits.aes = 128, .mode.aes = TPM2_ALG_CFB};

/* A HMAC session salted with the storage primary (so its key is unknown to a bus listener), which
 * encrypts the first parameter of each command and response. */
static TSS2_RC start_session(ctpm *tpm, ESYS_TR *session) {
    TSS2_RC rc = api.start_auth_session(tpm->esys, tpm->primary, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                                        ESYS_TR_NONE, NULL, TPM2_SE_HMAC, &session_cipher, TPM2_ALG_SHA256, session);
    if (rc != TSS2_RC_SUCCESS) return rc;
    rc = api.trsess_set_attributes(tpm->esys, *session,
                                   TPMA_SESSION_CONTINUESESSION | TPMA_SESSION_DECRYPT | TPMA_SESSION_ENCRYPT, 0xff);
    if (rc != TSS2_RC_SUCCESS) {
        api.flush_context(tpm->esys, *session);
        *session = ESYS_TR_NONE;
    }
    return rc;
}

static void flush(ctpm *tpm, ESYS_TR *handle) {
    if (*handle != ESYS_TR_NONE) api.flush_context(tpm->esys, *handle);
    *handle = ESYS_TR_NONE;
}

uint32_t ctpm_open(const char *tcti, ctpm **out) {
    *out = NULL;
    if (!ensure_loaded()) return CTPM_RC_NOT_LOADED;
    ctpm *tpm = calloc(1, sizeof *tpm);
    if (tpm == NULL) return TSS2_BASE_RC_MEMORY;
    tpm->primary = ESYS_TR_NONE;
    TSS2_RC rc = api.tctildr_initialize(tcti, &tpm->tcti);
    if (rc != TSS2_RC_SUCCESS) {
        free(tpm);
        /* tctildr reports every failure of the module's init as its own layer's; a caller reads
         * "could not reach" from the TCTI layer. */
        return (rc & TSS2_RC_LAYER_MASK) == TSS2_TCTI_RC_LAYER ? rc : (TSS2_TCTI_RC_LAYER | (rc & 0xffff));
    }
    rc = api.initialize(&tpm->esys, tpm->tcti, NULL);
    if (rc != TSS2_RC_SUCCESS) {
        api.tctildr_finalize(&tpm->tcti);
        free(tpm);
        return rc;
    }
    TPM2B_SENSITIVE_CREATE sensitive = {0};
    TPM2B_DATA outside = {0};
    TPML_PCR_SELECTION pcrs = {0};
    TPM2B_PUBLIC *public = NULL;
    TPM2B_CREATION_DATA *creation = NULL;
    TPM2B_DIGEST *hash = NULL;
    TPMT_TK_CREATION *ticket = NULL;
    rc = api.create_primary(tpm->esys, ESYS_TR_RH_OWNER, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive,
                            &primary_template, &outside, &pcrs, &tpm->primary, &public, &creation, &hash, &ticket);
    api.free(public);
    api.free(creation);
    api.free(hash);
    api.free(ticket);
    if (rc != TSS2_RC_SUCCESS) {
        ctpm_close(tpm);
        return rc;
    }
    *out = tpm;
    return TSS2_RC_SUCCESS;
}

void ctpm_close(ctpm *tpm) {
    if (tpm == NULL) return;
    if (tpm->esys != NULL) {
        flush(tpm, &tpm->primary);
        api.finalize(&tpm->esys);
    }
    if (tpm->tcti != NULL) api.tctildr_finalize(&tpm->tcti);
    free(tpm);
}

static int set_auth(TPM2B_AUTH *target, const uint8_t *auth, size_t auth_len) {
    if (auth_len > sizeof target->buffer) return 0;
    target->size = (UINT16)auth_len;
    if (auth_len > 0) memcpy(target->buffer, auth, auth_len);
    return 1;
}

/* Creates an object of `template` under the primary and marshals its blobs. */
static TSS2_RC create_object(ctpm *tpm, const TPM2B_SENSITIVE_CREATE *sensitive, const TPM2B_PUBLIC *template,
                             TPM2B_PUBLIC **created_public, uint8_t *pub, size_t pub_cap, size_t *pub_len,
                             uint8_t *priv, size_t priv_cap, size_t *priv_len) {
    ESYS_TR session = ESYS_TR_NONE;
    TSS2_RC rc = start_session(tpm, &session);
    if (rc != TSS2_RC_SUCCESS) return rc;
    TPM2B_DATA outside = {0};
    TPML_PCR_SELECTION pcrs = {0};
    TPM2B_PRIVATE *private = NULL;
    TPM2B_PUBLIC *public = NULL;
    TPM2B_CREATION_DATA *creation = NULL;
    TPM2B_DIGEST *hash = NULL;
    TPMT_TK_CREATION *ticket = NULL;
    rc = api.create(tpm->esys, tpm->primary, session, ESYS_TR_NONE, ESYS_TR_NONE, sensitive, template, &outside,
                    &pcrs, &private, &public, &creation, &hash, &ticket);
    flush(tpm, &session);
    api.free(creation);
    api.free(hash);
    api.free(ticket);
    if (rc == TSS2_RC_SUCCESS) {
        *pub_len = 0;
        *priv_len = 0;
        rc = api.public_marshal(public, pub, pub_cap, pub_len);
        if (rc == TSS2_RC_SUCCESS) rc = api.private_marshal(private, priv, priv_cap, priv_len);
        if (rc != TSS2_RC_SUCCESS) rc = CTPM_RC_TOO_SMALL;
    }
    api.free(private);
    if (created_public != NULL && rc == TSS2_RC_SUCCESS) {
        *created_public = public;
    } else {
        api.free(public);
    }
    return rc;
}

/* Loads an object's blobs under the primary; the caller flushes `object`. */
static TSS2_RC load_object(ctpm *tpm, ESYS_TR session, const uint8_t *pub, size_t pub_len, const uint8_t *priv,
                           size_t priv_len, ESYS_TR *object) {
    TPM2B_PUBLIC public = {0};
    TPM2B_PRIVATE private = {0};
    size_t offset = 0;
    if (api.public_unmarshal(pub, pub_len, &offset, &public) != TSS2_RC_SUCCESS || offset != pub_len)
        return CTPM_RC_MALFORMED;
    offset = 0;
    if (api.private_unmarshal(priv, priv_len, &offset, &private) != TSS2_RC_SUCCESS || offset != priv_len)
        return CTPM_RC_MALFORMED;
    return api.load(tpm->esys, tpm->primary, session, ESYS_TR_NONE, ESYS_TR_NONE, &private, &public, object);
}

uint32_t ctpm_seal(ctpm *tpm, const uint8_t *auth, size_t auth_len, const uint8_t *secret, size_t secret_len,
                   uint8_t *pub, size_t pub_cap, size_t *pub_len, uint8_t *priv, size_t priv_cap, size_t *priv_len) {
    TPM2B_SENSITIVE_CREATE sensitive = {0};
    if (!set_auth(&sensitive.sensitive.userAuth, auth, auth_len)) return CTPM_RC_MALFORMED;
    if (secret_len == 0 || secret_len > sizeof sensitive.sensitive.data.buffer) return CTPM_RC_MALFORMED;
    sensitive.sensitive.data.size = (UINT16)secret_len;
    memcpy(sensitive.sensitive.data.buffer, secret, secret_len);
    /* A sealed data object: no noDA, so each wrong authValue counts toward the TPM's lockout. */
    const TPM2B_PUBLIC template = {
        .publicArea =
            {
                .type = TPM2_ALG_KEYEDHASH,
                .nameAlg = TPM2_ALG_SHA256,
                .objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_USERWITHAUTH,
                .parameters.keyedHashDetail.scheme = {.scheme = TPM2_ALG_NULL},
            },
    };
    TSS2_RC rc = create_object(tpm, &sensitive, &template, NULL, pub, pub_cap, pub_len, priv, priv_cap, priv_len);
    explicit_bzero(&sensitive, sizeof sensitive);
    return rc;
}

uint32_t ctpm_unseal(ctpm *tpm, const uint8_t *auth, size_t auth_len, const uint8_t *pub, size_t pub_len,
                     const uint8_t *priv, size_t priv_len, uint8_t *out, size_t out_cap, size_t *out_len) {
    *out_len = 0;
    TPM2B_AUTH value = {0};
    if (!set_auth(&value, auth, auth_len)) return CTPM_RC_MALFORMED;
    ESYS_TR session = ESYS_TR_NONE, object = ESYS_TR_NONE;
    TSS2_RC rc = start_session(tpm, &session);
    if (rc == TSS2_RC_SUCCESS) rc = load_object(tpm, session, pub, pub_len, priv, priv_len, &object);
    if (rc == TSS2_RC_SUCCESS) rc = api.tr_set_auth(tpm->esys, object, &value);
    TPM2B_SENSITIVE_DATA *data = NULL;
    if (rc == TSS2_RC_SUCCESS) rc = api.unseal(tpm->esys, object, session, ESYS_TR_NONE, ESYS_TR_NONE, &data);
    if (rc == TSS2_RC_SUCCESS) {
        if (data->size > out_cap) {
            rc = CTPM_RC_TOO_SMALL;
        } else {
            memcpy(out, data->buffer, data->size);
            *out_len = data->size;
        }
    }
    if (data != NULL) {
        explicit_bzero(data, sizeof *data);
        api.free(data);
    }
    explicit_bzero(&value, sizeof value);
    flush(tpm, &object);
    flush(tpm, &session);
    return rc;
}

uint32_t ctpm_set_lockout(ctpm *tpm, uint32_t max_tries, uint32_t recovery_seconds,
                          uint32_t lockout_recovery_seconds) {
    return api.dictionary_attack_parameters(tpm->esys, ESYS_TR_RH_LOCKOUT, ESYS_TR_PASSWORD, ESYS_TR_NONE,
                                            ESYS_TR_NONE, max_tries, recovery_seconds, lockout_recovery_seconds);
}

uint32_t ctpm_lockout_state(ctpm *tpm, uint32_t *counter, uint32_t *max_tries, uint32_t *interval) {
    TPMS_CAPABILITY_DATA *data = NULL;
    TPMI_YES_NO more = 0;
    TSS2_RC rc = api.get_capability(tpm->esys, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, TPM2_CAP_TPM_PROPERTIES,
                                    TPM2_PT_LOCKOUT_COUNTER, 3, &more, &data);
    if (rc != TSS2_RC_SUCCESS) return rc;
    int found = 0;
    const TPML_TAGGED_TPM_PROPERTY *list = &data->data.tpmProperties;
    for (UINT32 i = 0; i < list->count && i < TPM2_MAX_TPM_PROPERTIES; i++) {
        if (list->tpmProperty[i].property == TPM2_PT_LOCKOUT_COUNTER) {
            *counter = list->tpmProperty[i].value;
            found |= 1;
        } else if (list->tpmProperty[i].property == TPM2_PT_MAX_AUTH_FAIL) {
            *max_tries = list->tpmProperty[i].value;
            found |= 2;
        } else if (list->tpmProperty[i].property == TPM2_PT_LOCKOUT_INTERVAL) {
            *interval = list->tpmProperty[i].value;
            found |= 4;
        }
    }
    api.free(data);
    return found == 7 ? TSS2_RC_SUCCESS : (TSS2_RC)TSS2_BASE_RC_GENERAL_FAILURE;
}

uint32_t ctpm_create_signing_key(ctpm *tpm, const uint8_t *auth, size_t auth_len, uint8_t x[32], uint8_t y[32],
                                 uint8_t *pub, size_t pub_cap, size_t *pub_len, uint8_t *priv, size_t priv_cap,
                                 size_t *priv_len) {
    TPM2B_SENSITIVE_CREATE sensitive = {0};
    if (!set_auth(&sensitive.sensitive.userAuth, auth, auth_len)) return CTPM_RC_MALFORMED;
    /* Generated inside the TPM and bound to it and to the storage primary: the private key never
     * leaves the TPM unencrypted, and its blob loads nowhere else. Sign-only, ECDSA with SHA-256. */
    const TPM2B_PUBLIC template = {
        .publicArea =
            {
                .type = TPM2_ALG_ECC,
                .nameAlg = TPM2_ALG_SHA256,
                .objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT |
                                    TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_USERWITHAUTH |
                                    TPMA_OBJECT_SIGN_ENCRYPT,
                .parameters.eccDetail =
                    {
                        .symmetric = {.algorithm = TPM2_ALG_NULL},
                        .scheme = {.scheme = TPM2_ALG_ECDSA, .details.ecdsa.hashAlg = TPM2_ALG_SHA256},
                        .curveID = TPM2_ECC_NIST_P256,
                        .kdf = {.scheme = TPM2_ALG_NULL},
                    },
            },
    };
    TPM2B_PUBLIC *public = NULL;
    TSS2_RC rc = create_object(tpm, &sensitive, &template, &public, pub, pub_cap, pub_len, priv, priv_cap, priv_len);
    explicit_bzero(&sensitive, sizeof sensitive);
    if (rc != TSS2_RC_SUCCESS) return rc;
    const TPMS_ECC_POINT *point = &public->publicArea.unique.ecc;
    if (point->x.size > 32 || point->y.size > 32) {
        rc = TSS2_BASE_RC_GENERAL_FAILURE;
    } else {
        /* Left-padded: a coordinate may come shorter than the field's 32 bytes. */
        memset(x, 0, 32);
        memset(y, 0, 32);
        memcpy(x + 32 - point->x.size, point->x.buffer, point->x.size);
        memcpy(y + 32 - point->y.size, point->y.buffer, point->y.size);
    }
    api.free(public);
    return rc;
}

uint32_t ctpm_sign(ctpm *tpm, const uint8_t *auth, size_t auth_len, const uint8_t *pub, size_t pub_len,
                   const uint8_t *priv, size_t priv_len, const uint8_t digest[32], uint8_t signature[64]) {
    TPM2B_AUTH value = {0};
    if (!set_auth(&value, auth, auth_len)) return CTPM_RC_MALFORMED;
    ESYS_TR session = ESYS_TR_NONE, object = ESYS_TR_NONE;
    TSS2_RC rc = start_session(tpm, &session);
    if (rc == TSS2_RC_SUCCESS) rc = load_object(tpm, session, pub, pub_len, priv, priv_len, &object);
    if (rc == TSS2_RC_SUCCESS) rc = api.tr_set_auth(tpm->esys, object, &value);
    TPM2B_DIGEST message = {.size = 32};
    memcpy(message.buffer, digest, 32);
    const TPMT_SIG_SCHEME scheme = {.scheme = TPM2_ALG_ECDSA, .details.ecdsa.hashAlg = TPM2_ALG_SHA256};
    /* An unrestricted key signs any digest: a null ticket. */
    const TPMT_TK_HASHCHECK ticket = {.tag = TPM2_ST_HASHCHECK, .hierarchy = TPM2_RH_NULL};
    TPMT_SIGNATURE *result = NULL;
    if (rc == TSS2_RC_SUCCESS)
        rc = api.sign(tpm->esys, object, session, ESYS_TR_NONE, ESYS_TR_NONE, &message, &scheme, &ticket, &result);
    if (rc == TSS2_RC_SUCCESS) {
        const TPMS_SIGNATURE_ECC *ecdsa = &result->signature.ecdsa;
        if (result->sigAlg != TPM2_ALG_ECDSA || ecdsa->signatureR.size > 32 || ecdsa->signatureS.size > 32) {
            rc = TSS2_BASE_RC_GENERAL_FAILURE;
        } else {
            memset(signature, 0, 64);
            memcpy(signature + 32 - ecdsa->signatureR.size, ecdsa->signatureR.buffer, ecdsa->signatureR.size);
            memcpy(signature + 64 - ecdsa->signatureS.size, ecdsa->signatureS.buffer, ecdsa->signatureS.size);
        }
    }
    api.free(result);
    explicit_bzero(&value, sizeof value);
    flush(tpm, &object);
    flush(tpm, &session);
    return rc;
}

ctpm_kind_t ctpm_kind(uint32_t rc) {
    if (rc == TSS2_RC_SUCCESS) return CTPM_OK;
    if (rc == CTPM_RC_NOT_LOADED) return CTPM_NOT_LOADED;
    if (rc == CTPM_RC_MALFORMED) return CTPM_MALFORMED;
    uint32_t layer = rc & TSS2_RC_LAYER_MASK;
    if (layer == TSS2_TCTI_RC_LAYER) return CTPM_UNREACHABLE;
    /* The TPM's own answer, or the resource manager's on its behalf. */
    if (layer != TSS2_TPM_RC_LAYER && layer != TSS2_RESMGR_TPM_RC_LAYER) return CTPM_OTHER;
    uint32_t code = rc & 0xffff;
    if (code & TPM2_RC_FMT1) {
        /* Format one: the error in bits 0-5, beside which handle, session or parameter it concerns
         * (TPM2_RC_P, TPM2_RC_S and the number in bits 8-11), which do not change its meaning. */
        switch (code & (TPM2_RC_FMT1 | 0x3f)) {
        case TPM2_RC_AUTH_FAIL:
        case TPM2_RC_BAD_AUTH:
            return CTPM_WRONG_AUTH;
        case TPM2_RC_INTEGRITY:
        case TPM2_RC_BINDING:
            return CTPM_NOT_THIS_TPM;
        default:
            return CTPM_OTHER;
        }
    }
    if (code == TPM2_RC_LOCKOUT) return CTPM_LOCKED_OUT;
    if (code == TPM2_RC_SENSITIVE) return CTPM_NOT_THIS_TPM;
    return CTPM_OTHER;
}

const char *ctpm_decode(uint32_t rc) {
    switch (rc) {
    case CTPM_RC_NOT_LOADED:
        return "tpm2-tss could not be loaded";
    case CTPM_RC_MALFORMED:
        return "malformed input (a blob that is no TPM object, or a value too long)";
    case CTPM_RC_TOO_SMALL:
        return "the TPM's answer is larger than expected";
    default:
        return ctpm_is_loaded() ? api.rc_decode(rc) : "tpm2-tss is not loaded";
    }
}
