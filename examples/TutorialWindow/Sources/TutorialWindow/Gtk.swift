import CGtk

/// GTK's widgets as Swift sees them: every constructor returns a `GtkWidget *`; the typed
/// functions want their own type, so these convert (GTK checks the type at run time anyway).
typealias Widget = UnsafeMutablePointer<GtkWidget>

extension UnsafeMutablePointer where Pointee == GtkWidget {
    /// This widget as another of GTK's struct types (`GtkBox`, `GtkButton`, ...).
    func `as`<T>(_: T.Type) -> UnsafeMutablePointer<T> { UnsafeMutableRawPointer(self).assumingMemoryBound(to: T.self) }
    /// This widget as one of GTK's opaque types (`GtkLabel`, `GtkStack`, ...).
    var opaque: OpaquePointer { OpaquePointer(self) }
    var raw: UnsafeMutableRawPointer { UnsafeMutableRawPointer(self) }

    func setVisible(_ visible: Bool) { gtk_widget_set_visible(self, visible ? 1 : 0) }
    func setSensitive(_ sensitive: Bool) { gtk_widget_set_sensitive(self, sensitive ? 1 : 0) }
    func accessibleLabel(_ label: String) { tw_set_accessible_label(self, label) }
    func accessibleDescription(_ text: String) { tw_set_accessible_description(self, text) }
    func margins(_ value: Int32) {
        gtk_widget_set_margin_top(self, value)
        gtk_widget_set_margin_bottom(self, value)
        gtk_widget_set_margin_start(self, value)
        gtk_widget_set_margin_end(self, value)
    }
}

enum Make {
    static func box(vertical: Bool, spacing: Int32 = 8, _ children: [Widget] = []) -> Widget {
        let box = gtk_box_new(vertical ? GTK_ORIENTATION_VERTICAL : GTK_ORIENTATION_HORIZONTAL, spacing)!
        for child in children { gtk_box_append(box.as(GtkBox.self), child) }
        return box
    }

    static func label(_ text: String, accessibleName: String? = nil, wrap: Bool = true) -> Widget {
        let label = gtk_label_new(text)!
        gtk_label_set_wrap(label.opaque, wrap ? 1 : 0)
        gtk_label_set_xalign(label.opaque, 0)
        gtk_label_set_selectable(label.opaque, 0)
        if let accessibleName { label.accessibleLabel(accessibleName) }
        return label
    }

    static func button(_ text: String, _ action: @escaping () -> Void) -> Widget {
        let button = gtk_button_new_with_label(text)!
        Signals.connect(button.raw, "clicked", action)
        return button
    }

    static func entry(placeholder: String, accessibleName: String) -> Widget {
        let entry = gtk_entry_new()!
        gtk_entry_set_placeholder_text(entry.as(GtkEntry.self), placeholder)
        entry.accessibleLabel(accessibleName)
        return entry
    }

    static func passwordEntry(accessibleName: String) -> Widget {
        let entry = gtk_password_entry_new()!
        gtk_password_entry_set_show_peek_icon(entry.opaque, 1)
        tw_set_string_property(entry.raw, "placeholder-text", accessibleName)
        entry.accessibleLabel(accessibleName)
        return entry
    }
}

extension UnsafeMutablePointer where Pointee == GtkWidget {
    /// A label's text.
    var labelText: String {
        get { String(cString: gtk_label_get_text(opaque)) }
        nonmutating set { gtk_label_set_text(opaque, newValue) }
    }

    /// An editable's (entry's) text.
    var editableText: String {
        get { String(cString: gtk_editable_get_text(opaque)) }
        nonmutating set { gtk_editable_set_text(opaque, newValue) }
    }
}
