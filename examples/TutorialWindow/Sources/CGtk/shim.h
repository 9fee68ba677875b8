// SPDX-License-Identifier: MIT
// GTK 4 and libadwaita for Swift: what their C macros and variadic functions do, as typed
// inline functions (Swift imports neither), prefixed tw_. Nothing else lives here.
#pragma once
#include <adwaita.h>
#include <gtk/gtk.h>
#include <libintl.h>
#include <locale.h>

typedef void (*tw_callback)(void *widget, void *data);
/// A handler with one argument besides the instance (GAction's activate, notify::PROPERTY).
typedef void (*tw_callback_with_argument)(void *widget, void *argument, void *data);
typedef gboolean (*tw_source_callback)(void *data);

/// g_signal_connect (a macro) with a plain callback and data freed by `destroy`.
static inline gulong tw_signal_connect(void *instance, const char *signal, tw_callback callback, void *data,
                                       GClosureNotify destroy) {
    return g_signal_connect_data(instance, signal, G_CALLBACK(callback), data, destroy, 0);
}

static inline gulong tw_signal_connect_with_argument(void *instance, const char *signal,
                                                     tw_callback_with_argument callback, void *data,
                                                     GClosureNotify destroy) {
    return g_signal_connect_data(instance, signal, G_CALLBACK(callback), data, destroy, 0);
}

/// A string property of any GObject (g_object_set is variadic).
static inline void tw_set_string_property(void *object, const char *name, const char *value) {
    g_object_set(object, name, value, NULL);
}

/// The accessible name of a widget that shows no label of its own (gtk_accessible_update_property is variadic).
static inline void tw_set_accessible_label(GtkWidget *widget, const char *label) {
    gtk_accessible_update_property(GTK_ACCESSIBLE(widget), GTK_ACCESSIBLE_PROPERTY_LABEL, label, -1);
}

/// An accessible description (what the control does, or what went wrong).
static inline void tw_set_accessible_description(GtkWidget *widget, const char *description) {
    gtk_accessible_update_property(GTK_ACCESSIBLE(widget), GTK_ACCESSIBLE_PROPERTY_DESCRIPTION, description, -1);
}

/// Runs `callback(data)` once on GTK's main context (g_idle_add_full with a priority of its own).
static inline guint tw_idle_once(tw_source_callback callback, void *data) {
    return g_idle_add_full(G_PRIORITY_DEFAULT, (GSourceFunc)callback, data, NULL);
}

static inline gboolean tw_source_remove(void) { return G_SOURCE_REMOVE; }

/// Renders `widget` as it looks now into a PNG at `path` (its own drawing, whatever covers the
/// window on screen): a screenshot of one window, for tests and the README.
static inline gboolean tw_save_png(GtkWidget *widget, const char *path) {
    int width = gtk_widget_get_width(widget), height = gtk_widget_get_height(widget);
    GtkNative *native = gtk_widget_get_native(widget);
    if (width <= 0 || height <= 0 || native == NULL) return FALSE;
    GdkPaintable *paintable = gtk_widget_paintable_new(widget);
    GtkSnapshot *snapshot = gtk_snapshot_new();
    gdk_paintable_snapshot(paintable, GDK_SNAPSHOT(snapshot), width, height);
    GskRenderNode *node = gtk_snapshot_free_to_node(snapshot);
    gboolean saved = FALSE;
    if (node != NULL) {
        graphene_rect_t bounds = GRAPHENE_RECT_INIT(0, 0, width, height);
        GdkTexture *texture = gsk_renderer_render_texture(gtk_native_get_renderer(native), node, &bounds);
        saved = gdk_texture_save_to_png(texture, path);
        g_object_unref(texture);
        gsk_render_node_unref(node);
    }
    g_object_unref(paintable);
    return saved;
}

/// A horizontal box whose accessible role is an alert (AT-SPI's notification), so that a screen
/// reader announces it when it appears; the role can only be given at construction.
static inline GtkWidget *tw_alert_box_new(int spacing) {
    return GTK_WIDGET(g_object_new(GTK_TYPE_BOX, "orientation", GTK_ORIENTATION_HORIZONTAL, "spacing", spacing,
                                   "accessible-role", GTK_ACCESSIBLE_ROLE_ALERT, NULL));
}

/// A GAction parameter type of one string (G_VARIANT_TYPE_STRING is a macro).
static inline const GVariantType *tw_variant_type_string(void) { return G_VARIANT_TYPE_STRING; }

/// The translation of `text` in the tutorial's domain.
static inline const char *tw_gettext(const char *text) { return dgettext("tutorial-window", text); }
