# shared-device-broker: the two commands are `make demo` and `make test`.
# Each installs what is missing (Debian packages), builds, and runs.

SWIFT        ?= swift
PREFIX       ?= /usr/local
CONFIG       ?= debug
BIN_DIR       = $(shell $(SWIFT) build -c $(CONFIG) --show-bin-path 2>/dev/null)
# What building and `make demo` need: the libraries brokerd links, the headers of those it opens on
# first use (libcurl, tpm2-tss, pcsc-lite), dbus-daemon for the demo's private bus, and python3 for the version file.
DEMO_PACKAGES = libdbus-1-dev libcurl4-openssl-dev libtss2-dev libpcsclite-dev pkg-config dbus python3
# What the test suite needs besides: the Secret Service, a window manager's idle monitor under
# Xvfb, a notification server, the Python D-Bus clients, the manual pages' tool, a software TPM and
# a virtual badge reader (pcscd with vsmartcard's vpcd driver; the badge itself is the tests' own Python).
APT_PACKAGES  = $(DEMO_PACKAGES) python3-dbus python3-gi gjs gnome-keyring curl scdoc \
	mutter libgl1-mesa-dri notification-daemon xvfb swtpm swtpm-tools pcscd vsmartcard-vpcd
# What `make install` puts under PREFIX (and `make uninstall` removes), relative to PREFIX.
INSTALLED_FILES = bin/brokerd bin/brokerctl share/man/man1/brokerctl.1 share/man/man5/broker.conf.5 \
	share/man/man8/brokerd.8 share/bash-completion/completions/brokerd share/bash-completion/completions/brokerctl \
	share/zsh/site-functions/_brokerd share/zsh/site-functions/_brokerctl \
	share/fish/vendor_completions.d/brokerd.fish share/fish/vendor_completions.d/brokerctl.fish \
	share/dbus-1/interfaces/io.shareddevice.Broker1.xml share/dbus-1/services/io.shareddevice.Broker1.service \
	lib/systemd/user/shared-device-broker.service share/dbus-1/services/com.microsoft.identity.broker1.service \
	lib/systemd/user/dbus-com.microsoft.identity.broker1.service \
	lib/systemd/user/shared-device-broker.service.d/microsoft-broker1.conf \
	share/doc/shared-device-broker/broker.conf.example
RELEASE_BIN   = $(shell $(SWIFT) build -c release --show-bin-path 2>/dev/null)
INSTALL_BIN  ?= $(RELEASE_BIN)
# The GTK tutorial window (examples/TutorialWindow) and its tests: a headless X server, the
# accessibility bus and its Python client, screenshots, translations, real X input (xdotool) and
# the X server's idle time (python3-xlib, for the sign-out after inactivity).
GUI_PACKAGES  = libgtk-4-dev libadwaita-1-dev xvfb x11-apps at-spi2-core python3-pyatspi python3-pil gettext \
	xdotool python3-xlib
# The browser suite (Tests/Browser): a real Chromium driven by Selenium under Xvfb, pages opened by
# the real desktop portal (with its GTK backend) on a private bus.
BROWSER_PACKAGES = chromium chromium-driver python3-selenium xdg-desktop-portal xdg-desktop-portal-gtk xvfb
WINDOW_DIR    = examples/TutorialWindow
WINDOW_BIN    = $(shell $(SWIFT) build --package-path $(WINDOW_DIR) -c $(CONFIG) --show-bin-path 2>/dev/null)
SUDO          = $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Release builds link the Swift runtime, Concurrency, Dispatch and Foundation statically: brokerctl
# starts without loading and binding those libraries (most of a one-call run), and an idle brokerd
# counts only the pages it touches. Debug builds (make test) stay dynamic. See BENCHMARKS.md.
# Without SwiftPM's $ORIGIN library path: nothing is loaded from beside the binaries, and the
# dynamic loader would look for every library in /usr/bin and a dozen of its subdirectories first.
# Generic types such as [String: DBusValue] made by their metadata accessors, not looked up by
# mangled name: the lookup checks the type's requirements (String: Hashable) by searching every
# protocol conformance in the binary, a search brokerctl paid once per type, each run. A frontend
# option (-Xfrontend; checked with Swift 6.3): a toolchain without it stops the build, naming it.
RELEASE_FLAGS ?= --static-swift-stdlib --disable-local-rpath \
	-Xswiftc -Xfrontend -Xswiftc -disable-concrete-type-metadata-mangled-name-accessors
BUILD_FLAGS   = $(if $(filter release,$(CONFIG)),$(RELEASE_FLAGS))

.PHONY: all deps demo-deps build demo test contract release release-flags deb deb-test man completions install uninstall version check-version gui-deps gui test-gui demo-gui check-contract lint format install clean bench bench-smoke

all: build

## demo-deps: what building and the demo need (DEMO_PACKAGES), when missing.
demo-deps:
	@if ! pkg-config --exists dbus-1 libcurl tss2-esys tss2-tctildr tss2-mu tss2-rc libpcsclite 2>/dev/null \
		|| ! command -v dbus-daemon >/dev/null || ! command -v python3 >/dev/null; then \
		echo "Installing $(DEMO_PACKAGES) ..."; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEMO_PACKAGES); \
	fi

## deps: everything the test suite needs besides (APT_PACKAGES), when missing.
deps: demo-deps
	@if ! pkg-config --exists dbus-1 libcurl tss2-esys 2>/dev/null || ! command -v dbus-daemon >/dev/null \
		|| ! command -v swtpm >/dev/null || ! command -v swtpm_setup >/dev/null \
		|| ! test -x /usr/sbin/pcscd || ! test -f /usr/lib/pcsc/drivers/serial/libifdvpcd.so \
		|| ! command -v gnome-keyring-daemon >/dev/null || ! command -v curl >/dev/null || ! command -v scdoc >/dev/null \
		|| ! command -v mutter >/dev/null || ! command -v Xvfb >/dev/null \
		|| ! test -x /usr/lib/notification-daemon/notification-daemon \
		|| ! /usr/bin/python3 -c 'import dbus, gi' 2>/dev/null; then \
		echo "Installing $(APT_PACKAGES) ..."; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
	fi

## gui-deps: what the GTK tutorial window needs to build and to be tested, when missing.
gui-deps: deps
	@if ! pkg-config --exists gtk4 libadwaita-1 2>/dev/null || ! command -v Xvfb >/dev/null \
		|| ! command -v xwd >/dev/null || ! command -v msgfmt >/dev/null || ! command -v xdotool >/dev/null \
		|| ! /usr/bin/python3 -c 'import pyatspi, PIL, Xlib' 2>/dev/null; then \
		echo "Installing $(GUI_PACKAGES) ..."; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(GUI_PACKAGES); \
	fi

## gui: build the GTK tutorial window (its own package, on the root one by path) and its translations.
gui: gui-deps
	$(SWIFT) build --package-path $(WINDOW_DIR) -c $(CONFIG)
	@for po in $(WINDOW_DIR)/po/*.po; do \
		lang=$$(basename $$po .po); mkdir -p "$(WINDOW_BIN)/locale/$$lang/LC_MESSAGES"; \
		msgfmt -o "$(WINDOW_BIN)/locale/$$lang/LC_MESSAGES/tutorial-window.mo" $$po; \
	done

## test-gui: the window under Xvfb, driven through AT-SPI with the real brokerd and idp-sim; its
## "Sign in with browser" through the real desktop portal into Chromium (Selenium), as test-browser.
## Screenshots of each state: $(WINDOW_DIR)/.build/test-artifacts/.
test-gui: build gui browser-deps
	/usr/bin/python3 $(WINDOW_DIR)/tests/test_window.py --window-bin "$(WINDOW_BIN)" --broker-bin "$(BIN_DIR)" \
		--artifacts $(WINDOW_DIR)/.build/test-artifacts

## browser-deps: what the browser suite needs, when missing.
.PHONY: browser-deps test-browser
browser-deps: deps
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null || ! command -v Xvfb >/dev/null \
		|| ! test -x /usr/libexec/xdg-desktop-portal || ! test -x /usr/libexec/xdg-desktop-portal-gtk \
		|| ! test -x /usr/libexec/xdg-permission-store || ! /usr/bin/python3 -c 'import selenium' 2>/dev/null; then \
		echo "Installing $(BROWSER_PACKAGES) ..."; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PACKAGES); \
	fi

## test-browser: sign-in and sign-out in a real Chromium (Selenium) under Xvfb, pages opened by brokerd
## through the real desktop portal on a private bus, with idp-sim. Screenshots: .build/browser-artifacts/.
test-browser: build browser-deps
	/usr/bin/python3 Tests/Browser/test_browser.py --broker-bin "$(BIN_DIR)" --artifacts .build/browser-artifacts

## provider-deps: Debian's glewlwyd (the packaged provider of test-providers), when missing. Where systemd
## runs, the package starts its own service (port 4593, /etc/glewlwyd); the suite runs its own instance.
.PHONY: provider-deps test-providers
provider-deps: browser-deps
	@if ! test -x /usr/bin/glewlwyd || ! test -f /usr/share/doc/glewlwyd/database/init.sqlite3.sql.gz \
		|| ! command -v openssl >/dev/null; then \
		echo "Installing glewlwyd openssl ..."; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq glewlwyd openssl; \
	fi

## test-providers: brokerd against Debian's glewlwyd on loopback (Tests/Providers), configured through its
## admin API as an administrator would (docs/providers.md, "Debian's glewlwyd").
test-providers: build provider-deps
	/usr/bin/python3 Tests/Providers/test_providers.py --broker-bin "$(BIN_DIR)"

## demo-gui: a private bus, idp-sim, brokerd in shared mode and two windows ("Mail", "Calendar") on
## your display, with `brokerctl watch` in this terminal.
demo-gui: build gui
	BIN_DIR="$(BIN_DIR)" WINDOW_BIN="$(WINDOW_BIN)" bash $(WINDOW_DIR)/demo.sh

## build: compile brokerd, brokerctl, idp-sim and the examples.
build: demo-deps version
	$(SWIFT) build -c $(CONFIG) $(BUILD_FLAGS)

## demo: a private bus, idp-sim, brokerd in shared mode and three app processes (Mail, Calendar, Notes):
## Mail signs alice in, Calendar signs out, and every app shows each change as its signal arrives.
## It needs only what building does (demo-deps), not the test suite's desktop pieces.
demo: build
	BIN_DIR="$(BIN_DIR)" bash examples/demo.sh

## test: the whole suite (unit, D-Bus layer, HTTP, idp-sim and end-to-end over private buses), then
## the GTK window under Xvfb, the browser suite (Chromium, the desktop portal), brokerd against Debian's
## glewlwyd (test-providers) and the Debian package (built, installed, upgraded, purged).
# Suites that bound how long another caller or a person waits: run after the rest, on their
# own, since the rest's 78 suites in parallel keep two cores' run queue at 9, and a bound
# with room for that would no longer tell a caller answered at once from one queued behind.
LATENCY_SUITES = ProviderFaultTests|IdleSignOutTests|ProviderSignOutTests|RedirectListenerTests
test: deps build check-contract check-version lint
	$(SWIFT) build -c $(CONFIG) $(BUILD_FLAGS) --build-tests
	$(SWIFT) test -c $(CONFIG) $(BUILD_FLAGS) --skip-build --skip '$(LATENCY_SUITES)'
	$(SWIFT) test -c $(CONFIG) $(BUILD_FLAGS) --skip-build --filter '$(LATENCY_SUITES)'
	$(MAKE) test-gui
	$(MAKE) test-browser
	$(MAKE) test-providers
	$(MAKE) deb-test

## version: embed VERSION in the build (Sources/BrokerAPI/BrokerRelease.swift); check-version: they agree.
version:
	python3 scripts/generate-version.py
check-version:
	python3 scripts/generate-version.py --check

## contract: regenerate the Swift side of every interface in dbus/*.xml (the interface description
## brokerd serves, its handler protocol, the method names both sides use, the client's calls), and
## brokerd's typed calls and signal readers of the desktop services in dbus/desktop/*.xml.
contract:
	python3 scripts/generate-contract.py

check-contract:
	python3 scripts/generate-contract.py --check

## lint: the house style, as .swift-format configures it (`make format` applies it), and lines of at
## most 120 columns (scripts/check-line-length.py).
lint:
	$(SWIFT) format lint --strict --recursive Sources Tests examples fuzz Package.swift
	python3 scripts/check-line-length.py

format:
	$(SWIFT) format format --in-place --recursive Sources Tests examples fuzz Package.swift

## release-flags: RELEASE_FLAGS, for the benchmarks' build (benchmarks/run.py).
release-flags:
	$(info RELEASE_FLAGS $(RELEASE_FLAGS))@:

## release: the release binaries, with the flags BENCHMARKS.md measured (RELEASE_FLAGS), their
## manual pages and shell completions. Run it as yourself: `make install` never builds.
release: deps version
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product brokerd
	$(SWIFT) build -c release $(RELEASE_FLAGS) --product brokerctl
	$(MAKE) man completions INSTALL_BIN="$(RELEASE_BIN)"

## deb: shared-device-broker_VERSION_ARCH.deb in .build/deb/, from `make release` (packaging/build-deb.sh).
deb: release
	bash packaging/build-deb.sh "$(RELEASE_BIN)" .build/deb

## deb-test: the package checked with lintian, installed, started by D-Bus activation, upgraded with a
## changed conffile and purged (packaging/test-deb.sh). It installs a package on this machine: root.
deb-test: deb build
	bash packaging/test-deb.sh "$(RELEASE_BIN)" .build/deb "$(BIN_DIR)"

## man: the manual pages (man/*.scd, scdoc) in .build/man/.
man:
	@command -v scdoc >/dev/null || { $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq scdoc; }
	mkdir -p .build/man
	for page in man/*.scd; do scdoc < $$page > .build/man/$$(basename $$page .scd); done

## completions: bash, zsh and fish completions of brokerd and brokerctl (swift-argument-parser's), in
## .build/completions/, from the binaries in INSTALL_BIN.
completions:
	mkdir -p .build/completions
	for program in brokerd brokerctl; do \
		"$(INSTALL_BIN)/$$program" --generate-completion-script bash | sed '1{/^#!/d}' \
			> .build/completions/$$program.bash && \
		"$(INSTALL_BIN)/$$program" --generate-completion-script zsh > .build/completions/_$$program && \
		"$(INSTALL_BIN)/$$program" --generate-completion-script fish > .build/completions/$$program.fish \
		|| exit 1; \
	done

## install: what `make release` built (INSTALL_BIN, the release binaries by default), its manual pages
## and completions, the interface XML, the D-Bus activation file and the systemd user unit, under
## PREFIX (default /usr/local); DESTDIR stages them elsewhere (packaging). It never builds.
install: install-data
	@test -x "$(INSTALL_BIN)/brokerd" && test -x "$(INSTALL_BIN)/brokerctl" \
		&& test -f .build/man/brokerd.8 && test -f .build/completions/brokerctl.bash \
		|| { echo "make install: nothing built in $(INSTALL_BIN); run \`make release\` first (as yourself, not root)" >&2; exit 1; }
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 \
		$(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 0755 "$(INSTALL_BIN)/brokerd" "$(INSTALL_BIN)/brokerctl" $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 .build/man/brokerctl.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 .build/man/broker.conf.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 0644 .build/man/brokerd.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	# A sample administrator's file, to copy to /etc/shared-device-broker/broker.conf (the .deb installs it there).
	install -d $(DESTDIR)$(PREFIX)/share/doc/shared-device-broker
	install -m 0644 packaging/debian/broker.conf $(DESTDIR)$(PREFIX)/share/doc/shared-device-broker/broker.conf.example
	for program in brokerd brokerctl; do \
		install -m 0644 .build/completions/$$program.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/$$program; \
		install -m 0644 .build/completions/_$$program $(DESTDIR)$(PREFIX)/share/zsh/site-functions/; \
		install -m 0644 .build/completions/$$program.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/; \
	done

## uninstall: removes every file install, install-data and install-microsoft-broker1 put under PREFIX.
uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED_FILES))
	-rmdir $(DESTDIR)$(PREFIX)/lib/systemd/user/shared-device-broker.service.d 2>/dev/null
	-rmdir $(DESTDIR)$(PREFIX)/share/doc/shared-device-broker 2>/dev/null

## install-data: only the data files, without building: the interface XML, and the activation file
## and user unit made from their templates (dbus/*.service.in, systemd/*.service.in) with @PREFIX@
## replaced, so that Exec= and ExecStart= name $(PREFIX)/bin/brokerd.
.PHONY: install-data
install-data:
	install -d $(DESTDIR)$(PREFIX)/share/dbus-1/interfaces $(DESTDIR)$(PREFIX)/share/dbus-1/services \
		$(DESTDIR)$(PREFIX)/lib/systemd/user
	install -m 0644 dbus/io.shareddevice.Broker1.xml $(DESTDIR)$(PREFIX)/share/dbus-1/interfaces/
	sed -e 's|@PREFIX@|$(PREFIX)|g' dbus/io.shareddevice.Broker1.service.in \
		> $(DESTDIR)$(PREFIX)/share/dbus-1/services/io.shareddevice.Broker1.service
	chmod 0644 $(DESTDIR)$(PREFIX)/share/dbus-1/services/io.shareddevice.Broker1.service
	sed -e 's|@PREFIX@|$(PREFIX)|g' systemd/shared-device-broker.service.in \
		> $(DESTDIR)$(PREFIX)/lib/systemd/user/shared-device-broker.service
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/user/shared-device-broker.service

## install-microsoft-broker1: opt-in, after install or install-data: lets apps written for
## Microsoft's Linux broker start brokerd by the name com.microsoft.identity.broker1 (its D-Bus
## activation file), as the alias dbus-com.microsoft.identity.broker1.service of the user unit, with a
## drop-in that adds --compat microsoft-broker1. Not part of install: Microsoft's broker, where
## installed, keeps its name. See docs/microsoft-broker1.md.
.PHONY: install-microsoft-broker1
install-microsoft-broker1:
	install -d $(DESTDIR)$(PREFIX)/share/dbus-1/services \
		$(DESTDIR)$(PREFIX)/lib/systemd/user/shared-device-broker.service.d
	sed -e 's|@PREFIX@|$(PREFIX)|g' dbus/com.microsoft.identity.broker1.service.in \
		> $(DESTDIR)$(PREFIX)/share/dbus-1/services/com.microsoft.identity.broker1.service
	chmod 0644 $(DESTDIR)$(PREFIX)/share/dbus-1/services/com.microsoft.identity.broker1.service
	sed -e 's|@PREFIX@|$(PREFIX)|g' systemd/microsoft-broker1.conf.in \
		> $(DESTDIR)$(PREFIX)/lib/systemd/user/shared-device-broker.service.d/microsoft-broker1.conf
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/user/shared-device-broker.service.d/microsoft-broker1.conf
	ln -sf shared-device-broker.service \
		$(DESTDIR)$(PREFIX)/lib/systemd/user/dbus-com.microsoft.identity.broker1.service

## bench: brokerd against a hand-written C libdbus service, side by side (a few minutes);
## BENCH_ARGS=--pin runs the services under taskset -c 0. Results: benchmarks/results/, BENCHMARKS.md.
bench: deps
	@command -v gcc >/dev/null && command -v curl >/dev/null && command -v taskset >/dev/null || { \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc curl util-linux; }
	@python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null || { echo "Installing python3-matplotlib (for the plot) ..."; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib || \
		{ $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib; }; }
	python3 benchmarks/run.py $(BENCH_ARGS)

## bench-smoke: the same comparisons, small (under a minute once built): a few hundred calls, K up to 10.
bench-smoke: deps
	python3 benchmarks/run.py --smoke $(BENCH_ARGS)

clean:
	rm -rf .build

## fuzz: coverage-guided fuzzing (libFuzzer, swiftc -sanitize=fuzzer) of every parser of outside data:
## provider JSON, token responses, ID tokens, JWKS, discovery documents, the state file, Microsoft's broker
## requests, the configuration file and the browser's redirect to the loopback listener, FUZZ_SECONDS (default
## 60) each. Not part of `make test`; see
## fuzz/README.md and docs/reliability.md ("Fuzzing").
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= json token jwt jwks discovery statefile redirect msbroker config sharedsignals
.PHONY: fuzz
fuzz: deps
	SWIFT=$(SWIFT) bash fuzz/build.sh $(FUZZ_TARGETS)
	@status=0; for target in $(FUZZ_TARGETS); do \
		FUZZ_SKIP_BUILD=1 bash fuzz/run.sh $$target $(FUZZ_SECONDS) || status=1; \
	done; exit $$status
