/*
 * reference: a minimal hand-written libdbus service answering the subset of
 * io.shareddevice.Broker1 the benchmarks call, with replies of the same shape and
 * (close to) the same size as brokerd's. Plain C, one thread, the
 * dbus_connection_read_write_dispatch loop, state in memory only (no file writes) unless
 * --state-dir is given.
 *
 * With --state-dir DIR (durable mode) a sign-in or sign-out writes a state file of --state-bytes
 * bytes as brokerd writes a snapshot: a temporary file written and renamed over DIR/state.json
 * before the signal, then an fsync of the file and of the directory before the reply. So the ratio
 * against it is brokerd's overhead, not the durability rule both keep.
 *
 *   reference [--address BUS] [--name NAME] [--token-len N] [--id-token-len N] [--signed-out]
 *             [--username S] [--identifier S] [--tenant-id S] [--environment S] [--display-name S] [--authority URL]
 *             [--state-dir DIR [--state-bytes N]]
 */
#include <dbus/dbus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#define IFACE "io.shareddevice.Broker1"
#define PATH  "/io/shareddevice/Broker1"

static const char *ACC_USERNAME = "alice@contoso.example";
static const char *ACC_IDENTIFIER = "5c2a1d4e-6f0b-4a8e-9b3c-2d7e8f1a0b4c.8d9e0f1a-2b3c-4d5e-8f6a-7b8c9d0e1f2a";
static const char *ACC_TENANT = "8d9e0f1a-2b3c-4d5e-8f6a-7b8c9d0e1f2a";
static const char *ACC_ENV = "127.0.0.1";
static const char *ACC_NAME = "Alice Demo";
static const char *AUTHORITY = "http://127.0.0.1:40000/contoso-demo/v2.0";

static int signed_in = 1;
static const char *state_dir;
static char *state_bytes; static size_t state_len = 2048;
static char state_path[4096], temp_path[4096];

/* The state file replaced (temporary file, write, rename): before the signal. Returns the file's
 * descriptor, still to be fsynced, or -1. */
static int write_state(void) {
    if (!state_dir) return -1;
    int fd = open(temp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) { perror("reference: open"); exit(1); }
    state_bytes[0] = signed_in ? '1' : '0';
    if (write(fd, state_bytes, state_len) != (ssize_t)state_len) { perror("reference: write"); exit(1); }
    if (rename(temp_path, state_path) != 0) { perror("reference: rename"); exit(1); }
    return fd;
}

/* The write made durable: the file, then the directory that holds the rename. Before the reply. */
static void sync_state(int fd) {
    if (fd < 0) return;
    if (fsync(fd) != 0) { perror("reference: fsync"); exit(1); }
    close(fd);
    int dir = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0 || fsync(dir) != 0) { perror("reference: fsync of the directory"); exit(1); }
    close(dir);
}
static char *access_token, *id_token, *auth_header;

/* clientId -> what it saw last (1 = alice, 0 = nobody): open addressing, grows. */
typedef struct { char *key; int seen; } slot_t;
static slot_t *table; static size_t cap = 1024, used;
static uint64_t hash(const char *s) { uint64_t h = 1469598103934665603ULL; while (*s) { h ^= (unsigned char)*s++; h *= 1099511628211ULL; } return h; }
static slot_t *lookup(const char *key, int create) {
    if (create && used * 2 >= cap) {
        slot_t *old = table; size_t oc = cap; cap *= 2; table = calloc(cap, sizeof *table); used = 0;
        for (size_t i = 0; i < oc; i++) if (old[i].key) { slot_t *s = lookup(old[i].key, 1); s->key = old[i].key; s->seen = old[i].seen; used++; }
        free(old);
    }
    for (size_t i = hash(key) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (!table[i].key) { if (!create) return NULL; table[i].key = strdup(key); table[i].seen = 0; used++; return &table[i]; }
        if (strcmp(table[i].key, key) == 0) return &table[i];
    }
}

static void dict_string(DBusMessageIter *dict, const char *key, const char *value) {
    DBusMessageIter entry, var;
    dbus_message_iter_open_container(dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
    dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key);
    dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "s", &var);
    dbus_message_iter_append_basic(&var, DBUS_TYPE_STRING, &value);
    dbus_message_iter_close_container(&entry, &var);
    dbus_message_iter_close_container(dict, &entry);
}

static void append_account_fields(DBusMessageIter *dict) {
    dict_string(dict, "username", ACC_USERNAME);
    dict_string(dict, "identifier", ACC_IDENTIFIER);
    dict_string(dict, "tenantId", ACC_TENANT);
    dict_string(dict, "environment", ACC_ENV);
    dict_string(dict, "name", ACC_NAME);
}

static void append_account(DBusMessageIter *it, int present) {
    DBusMessageIter dict;
    dbus_message_iter_open_container(it, DBUS_TYPE_ARRAY, "{sv}", &dict);
    if (present) append_account_fields(&dict);
    dbus_message_iter_close_container(it, &dict);
}

static void append_result(DBusMessageIter *it, const char **scopes, int nscopes) {
    DBusMessageIter dict, entry, var, arr;
    static unsigned corr;
    char correlation[64];
    snprintf(correlation, sizeof correlation, "%08x-0000-4000-8000-%012x", corr + 1, corr + 1); corr++;
    dbus_message_iter_open_container(it, DBUS_TYPE_ARRAY, "{sv}", &dict);
    dict_string(&dict, "accessToken", access_token);
    {
        const char *key = "expiresOn"; dbus_int64_t exp = (dbus_int64_t)time(NULL) + 3600;
        dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
        dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key);
        dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "x", &var);
        dbus_message_iter_append_basic(&var, DBUS_TYPE_INT64, &exp);
        dbus_message_iter_close_container(&entry, &var);
        dbus_message_iter_close_container(&dict, &entry);
    }
    dict_string(&dict, "idToken", id_token);
    {
        const char *key = "scopes";
        dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
        dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key);
        dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "as", &var);
        dbus_message_iter_open_container(&var, DBUS_TYPE_ARRAY, "s", &arr);
        for (int i = 0; i < nscopes; i++) dbus_message_iter_append_basic(&arr, DBUS_TYPE_STRING, &scopes[i]);
        dbus_message_iter_close_container(&var, &arr);
        dbus_message_iter_close_container(&entry, &var);
        dbus_message_iter_close_container(&dict, &entry);
    }
    {
        const char *key = "account"; DBusMessageIter inner;
        dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
        dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key);
        dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "a{sv}", &var);
        dbus_message_iter_open_container(&var, DBUS_TYPE_ARRAY, "{sv}", &inner);
        append_account_fields(&inner);
        dbus_message_iter_close_container(&var, &inner);
        dbus_message_iter_close_container(&entry, &var);
        dbus_message_iter_close_container(&dict, &entry);
    }
    dict_string(&dict, "authority", AUTHORITY);
    dict_string(&dict, "correlationId", correlation);
    dict_string(&dict, "authorizationHeader", auth_header);
    dbus_message_iter_close_container(it, &dict);
}

static void emit_changed(DBusConnection *c, int now_signed_in) {
    DBusMessage *sig = dbus_message_new_signal(PATH, IFACE, "AccountChanged");
    DBusMessageIter it;
    const char *reason = now_signed_in ? "signed-in" : "signed-out";
    dbus_message_iter_init_append(sig, &it);
    append_account(&it, now_signed_in);
    append_account(&it, !now_signed_in);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &reason);
    dbus_connection_send(c, sig, NULL);
    dbus_message_unref(sig);
}

static DBusHandlerResult handle(DBusConnection *c, DBusMessage *m, void *data) {
    (void)data;
    if (dbus_message_get_type(m) != DBUS_MESSAGE_TYPE_METHOD_CALL || !dbus_message_has_interface(m, IFACE))
        return DBUS_HANDLER_RESULT_NOT_YET_HANDLED;
    const char *member = dbus_message_get_member(m);
    DBusMessage *reply = NULL; DBusMessageIter in, out;
    dbus_message_iter_init(m, &in);
    if (strcmp(member, "GetCurrentAccount") == 0 && dbus_message_has_signature(m, "s")) {
        const char *client; dbus_message_iter_get_basic(&in, &client);
        slot_t *s = lookup(client, 1);
        int previous = s->seen; s->seen = signed_in;
        reply = dbus_message_new_method_return(m);
        dbus_message_iter_init_append(reply, &out);
        append_account(&out, signed_in);
        append_account(&out, previous);
    } else if (strcmp(member, "AcquireTokenSilent") == 0 && dbus_message_has_signature(m, "sassa{sv}")) {
        if (!signed_in) reply = dbus_message_new_error(m, IFACE ".Error.InteractionRequired", "nobody is signed in");
        else {
            const char *scopes[64]; int n = 0; DBusMessageIter arr;
            dbus_message_iter_next(&in); dbus_message_iter_recurse(&in, &arr);
            while (n < 64 && dbus_message_iter_get_arg_type(&arr) == DBUS_TYPE_STRING) { dbus_message_iter_get_basic(&arr, &scopes[n++]); dbus_message_iter_next(&arr); }
            reply = dbus_message_new_method_return(m);
            dbus_message_iter_init_append(reply, &out);
            append_result(&out, scopes, n);
        }
    } else if (strcmp(member, "SignOut") == 0 && dbus_message_has_signature(m, "ssa{sv}")) {
        if (!signed_in) reply = dbus_message_new_error(m, IFACE ".Error.NoAccount", "nobody is signed in; sign in first");
        else {
            signed_in = 0;
            int fd = write_state();
            emit_changed(c, 0);
            sync_state(fd);
            reply = dbus_message_new_method_return(m);
        }
    } else if (strcmp(member, "SignInWithPassword") == 0 && dbus_message_has_signature(m, "sssas")) {
        if (signed_in) reply = dbus_message_new_error(m, IFACE ".Error.AccountAlreadySignedIn", "sign out first");
        else {
            const char *scopes[64]; int n = 0; DBusMessageIter arr;
            dbus_message_iter_next(&in); dbus_message_iter_next(&in); dbus_message_iter_next(&in);
            dbus_message_iter_recurse(&in, &arr);
            while (n < 64 && dbus_message_iter_get_arg_type(&arr) == DBUS_TYPE_STRING) { dbus_message_iter_get_basic(&arr, &scopes[n++]); dbus_message_iter_next(&arr); }
            signed_in = 1;
            int fd = write_state();
            emit_changed(c, 1);
            sync_state(fd);
            reply = dbus_message_new_method_return(m);
            dbus_message_iter_init_append(reply, &out);
            append_result(&out, scopes, n);
        }
    } else if (strcmp(member, "GetDeviceInformation") == 0 && dbus_message_has_signature(m, "")) {
        DBusMessageIter dict, entry, var, sd;
        reply = dbus_message_new_method_return(m);
        dbus_message_iter_init_append(reply, &out);
        dbus_message_iter_open_container(&out, DBUS_TYPE_ARRAY, "{sv}", &dict);
        dict_string(&dict, "deviceMode", "shared");
        dict_string(&dict, "brokerVersion", "0.1.0");
        dict_string(&dict, "deviceId", "0f8e1c2d-3b4a-4c5d-8e6f-7a8b9c0d1e2f");
        dict_string(&dict, "tenantId", "contoso-demo");
        dict_string(&dict, "authority", AUTHORITY);
        const char *key = "extraDeviceInformation";
        dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
        dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key);
        dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "a{ss}", &var);
        dbus_message_iter_open_container(&var, DBUS_TYPE_ARRAY, "{ss}", &sd);
        dbus_message_iter_close_container(&var, &sd);
        dbus_message_iter_close_container(&entry, &var);
        dbus_message_iter_close_container(&dict, &entry);
        dbus_message_iter_close_container(&out, &dict);
    } else {
        reply = dbus_message_new_error(m, DBUS_ERROR_UNKNOWN_METHOD, "no such method in the reference");
    }
    dbus_connection_send(c, reply, NULL);
    dbus_message_unref(reply);
    return DBUS_HANDLER_RESULT_HANDLED;
}

static char *filled(size_t n, char c) { char *s = malloc(n + 1); memset(s, c, n); s[n] = 0; return s; }

int main(int argc, char **argv) {
    const char *address = getenv("DBUS_SESSION_BUS_ADDRESS"), *name = IFACE;
    size_t token_len = 900, id_token_len = 900;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--address") && i + 1 < argc) address = argv[++i];
        else if (!strcmp(argv[i], "--name") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(argv[i], "--token-len") && i + 1 < argc) token_len = strtoul(argv[++i], 0, 10);
        else if (!strcmp(argv[i], "--id-token-len") && i + 1 < argc) id_token_len = strtoul(argv[++i], 0, 10);
        else if (!strcmp(argv[i], "--signed-out")) signed_in = 0;
        else if (!strcmp(argv[i], "--username") && i + 1 < argc) ACC_USERNAME = argv[++i];
        else if (!strcmp(argv[i], "--identifier") && i + 1 < argc) ACC_IDENTIFIER = argv[++i];
        else if (!strcmp(argv[i], "--tenant-id") && i + 1 < argc) ACC_TENANT = argv[++i];
        else if (!strcmp(argv[i], "--environment") && i + 1 < argc) ACC_ENV = argv[++i];
        else if (!strcmp(argv[i], "--display-name") && i + 1 < argc) ACC_NAME = argv[++i];
        else if (!strcmp(argv[i], "--authority") && i + 1 < argc) AUTHORITY = argv[++i];
        else if (!strcmp(argv[i], "--state-dir") && i + 1 < argc) state_dir = argv[++i];
        else if (!strcmp(argv[i], "--state-bytes") && i + 1 < argc) state_len = strtoul(argv[++i], 0, 10);
        else { fprintf(stderr, "usage: reference [--address BUS] [--name NAME] [--token-len N] [--id-token-len N] [--signed-out]\n"); return 2; }
    }
    if (!address) { fprintf(stderr, "reference: no bus address\n"); return 2; }
    access_token = filled(token_len, 'A'); id_token = filled(id_token_len, 'I');
    auth_header = malloc(token_len + 8); sprintf(auth_header, "Bearer %s", access_token);
    table = calloc(cap, sizeof *table);
    if (state_dir) {
        if (state_len < 1) state_len = 1;
        state_bytes = filled(state_len, 'S');
        snprintf(state_path, sizeof state_path, "%s/state.json", state_dir);
        snprintf(temp_path, sizeof temp_path, "%s/.state.json.tmp", state_dir);
    }

    DBusError err; dbus_error_init(&err);
    DBusConnection *c = dbus_connection_open_private(address, &err);
    if (!c || !dbus_bus_register(c, &err)) { fprintf(stderr, "reference: %s\n", err.message); return 1; }
    if (dbus_bus_request_name(c, name, DBUS_NAME_FLAG_DO_NOT_QUEUE, &err) != DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER) {
        fprintf(stderr, "reference: could not own %s\n", name); return 1;
    }
    DBusObjectPathVTable vt = { .message_function = handle };
    dbus_connection_register_object_path(c, PATH, &vt, NULL);
    printf("reference ready: %s on %s\n", name, address); fflush(stdout);
    while (dbus_connection_read_write_dispatch(c, -1)) {}
    return 0;
}
