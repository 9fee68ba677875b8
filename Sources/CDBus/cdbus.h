/* SPDX-License-Identifier: MIT */
/* Thin shim over libdbus for Swift: constants for macros that do not import
 * (they contain casts) and typed wrappers for the void*-based basic-value
 * accessors. No logic lives here. */
#ifndef CDBUS_H
#define CDBUS_H

#include <dbus/dbus.h>
#include <stdint.h>

enum {
    CDBUS_TYPE_INVALID = DBUS_TYPE_INVALID,
    CDBUS_TYPE_BYTE = DBUS_TYPE_BYTE,
    CDBUS_TYPE_BOOLEAN = DBUS_TYPE_BOOLEAN,
    CDBUS_TYPE_INT16 = DBUS_TYPE_INT16,
    CDBUS_TYPE_UINT16 = DBUS_TYPE_UINT16,
    CDBUS_TYPE_INT32 = DBUS_TYPE_INT32,
    CDBUS_TYPE_UINT32 = DBUS_TYPE_UINT32,
    CDBUS_TYPE_INT64 = DBUS_TYPE_INT64,
    CDBUS_TYPE_UINT64 = DBUS_TYPE_UINT64,
    CDBUS_TYPE_DOUBLE = DBUS_TYPE_DOUBLE,
    CDBUS_TYPE_STRING = DBUS_TYPE_STRING,
    CDBUS_TYPE_OBJECT_PATH = DBUS_TYPE_OBJECT_PATH,
    CDBUS_TYPE_SIGNATURE = DBUS_TYPE_SIGNATURE,
    CDBUS_TYPE_UNIX_FD = DBUS_TYPE_UNIX_FD,
    CDBUS_TYPE_ARRAY = DBUS_TYPE_ARRAY,
    CDBUS_TYPE_VARIANT = DBUS_TYPE_VARIANT,
    CDBUS_TYPE_STRUCT = DBUS_TYPE_STRUCT,
    CDBUS_TYPE_DICT_ENTRY = DBUS_TYPE_DICT_ENTRY,

    CDBUS_MESSAGE_TYPE_INVALID = DBUS_MESSAGE_TYPE_INVALID,
    CDBUS_MESSAGE_TYPE_METHOD_CALL = DBUS_MESSAGE_TYPE_METHOD_CALL,
    CDBUS_MESSAGE_TYPE_METHOD_RETURN = DBUS_MESSAGE_TYPE_METHOD_RETURN,
    CDBUS_MESSAGE_TYPE_ERROR = DBUS_MESSAGE_TYPE_ERROR,
    CDBUS_MESSAGE_TYPE_SIGNAL = DBUS_MESSAGE_TYPE_SIGNAL,

    CDBUS_NAME_FLAG_ALLOW_REPLACEMENT = DBUS_NAME_FLAG_ALLOW_REPLACEMENT,
    CDBUS_NAME_FLAG_REPLACE_EXISTING = DBUS_NAME_FLAG_REPLACE_EXISTING,
    CDBUS_NAME_FLAG_DO_NOT_QUEUE = DBUS_NAME_FLAG_DO_NOT_QUEUE,

    CDBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER = DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER,
    CDBUS_REQUEST_NAME_REPLY_IN_QUEUE = DBUS_REQUEST_NAME_REPLY_IN_QUEUE,
    CDBUS_REQUEST_NAME_REPLY_EXISTS = DBUS_REQUEST_NAME_REPLY_EXISTS,
    CDBUS_REQUEST_NAME_REPLY_ALREADY_OWNER = DBUS_REQUEST_NAME_REPLY_ALREADY_OWNER,

    CDBUS_TIMEOUT_INFINITE = DBUS_TIMEOUT_INFINITE,
    CDBUS_TIMEOUT_USE_DEFAULT = DBUS_TIMEOUT_USE_DEFAULT,

    CDBUS_MAXIMUM_NAME_LENGTH = DBUS_MAXIMUM_NAME_LENGTH,
    CDBUS_MAXIMUM_SIGNATURE_LENGTH = DBUS_MAXIMUM_SIGNATURE_LENGTH,
    CDBUS_MAXIMUM_TYPE_RECURSION_DEPTH = DBUS_MAXIMUM_TYPE_RECURSION_DEPTH,
};

/* Append a basic value by type. */
static inline dbus_bool_t cdbus_iter_append_byte(DBusMessageIter *it, uint8_t v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_BYTE, &v); }
static inline dbus_bool_t cdbus_iter_append_bool(DBusMessageIter *it, dbus_bool_t v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_BOOLEAN, &v); }
static inline dbus_bool_t cdbus_iter_append_int16(DBusMessageIter *it, int16_t v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_INT16, &v); }
static inline dbus_bool_t cdbus_iter_append_uint16(DBusMessageIter *it, uint16_t v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_UINT16, &v); }
static inline dbus_bool_t cdbus_iter_append_int32(DBusMessageIter *it, int32_t v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_INT32, &v); }
static inline dbus_bool_t cdbus_iter_append_uint32(DBusMessageIter *it, uint32_t v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_UINT32, &v); }
static inline dbus_bool_t cdbus_iter_append_int64(DBusMessageIter *it, int64_t v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_INT64, &v); }
static inline dbus_bool_t cdbus_iter_append_uint64(DBusMessageIter *it, uint64_t v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_UINT64, &v); }
static inline dbus_bool_t cdbus_iter_append_double(DBusMessageIter *it, double v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_DOUBLE, &v); }
static inline dbus_bool_t cdbus_iter_append_string(DBusMessageIter *it, const char *v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_STRING, &v); }
static inline dbus_bool_t cdbus_iter_append_object_path(DBusMessageIter *it, const char *v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_OBJECT_PATH, &v); }
static inline dbus_bool_t cdbus_iter_append_signature(DBusMessageIter *it, const char *v) { return dbus_message_iter_append_basic(it, DBUS_TYPE_SIGNATURE, &v); }

/* Read the basic value under the iterator; the caller checked its type. */
static inline uint8_t cdbus_iter_get_byte(DBusMessageIter *it) { uint8_t v = 0; dbus_message_iter_get_basic(it, &v); return v; }
static inline dbus_bool_t cdbus_iter_get_bool(DBusMessageIter *it) { dbus_bool_t v = 0; dbus_message_iter_get_basic(it, &v); return v; }
static inline int16_t cdbus_iter_get_int16(DBusMessageIter *it) { int16_t v = 0; dbus_message_iter_get_basic(it, &v); return v; }
static inline uint16_t cdbus_iter_get_uint16(DBusMessageIter *it) { uint16_t v = 0; dbus_message_iter_get_basic(it, &v); return v; }
static inline int32_t cdbus_iter_get_int32(DBusMessageIter *it) { int32_t v = 0; dbus_message_iter_get_basic(it, &v); return v; }
static inline uint32_t cdbus_iter_get_uint32(DBusMessageIter *it) { uint32_t v = 0; dbus_message_iter_get_basic(it, &v); return v; }
static inline int64_t cdbus_iter_get_int64(DBusMessageIter *it) { int64_t v = 0; dbus_message_iter_get_basic(it, &v); return v; }
static inline uint64_t cdbus_iter_get_uint64(DBusMessageIter *it) { uint64_t v = 0; dbus_message_iter_get_basic(it, &v); return v; }
static inline double cdbus_iter_get_double(DBusMessageIter *it) { double v = 0; dbus_message_iter_get_basic(it, &v); return v; }
/* For STRING, OBJECT_PATH and SIGNATURE; the pointer is owned by the message. */
static inline const char *cdbus_iter_get_string(DBusMessageIter *it) { const char *v = 0; dbus_message_iter_get_basic(it, &v); return v; }

#endif
