import ArgumentParser
import BrokerAPI

/// brokerctl: the shared-device broker from the command line, built on SharedDeviceClient.
///
/// Synchronous at the root: queries run without Swift concurrency, and the commands that need
/// it start it themselves (`AsyncCommand`).
@main
struct Brokerctl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "brokerctl",
        abstract: "Talk to the shared-device identity broker (brokerd) on the D-Bus session bus.",
        discussion: """
            Every command prints for people by default and JSON with --json. Errors print the \
            broker's D-Bus error name and a message, and exit with status 1.

            A first session:
              brokerctl device-info
              echo "$PASSWORD" | brokerctl sign-in --client-id mail-app \\
                  --username alice@contoso.example --password-stdin
              brokerctl current-account --client-id calendar-app
              brokerctl token --client-id mail-app --scope User.Read
              brokerctl me --client-id mail-app
              brokerctl sign-out --client-id calendar-app

            Signing in: with an emailed code (--username), a password (--password-stdin), \
            in the browser (--interactive), or on another device, for a kiosk without a \
            keyboard or browser (--device-code):
              brokerctl sign-in --client-id mail-app --device-code
            """,
        version: BrokerRelease.version,
        subcommands: [
            DeviceInfo.self, SignInOptionsCommand.self, CurrentAccount.self, SignIn.self, Token.self, Me.self,
            Accounts.self, SignOut.self, Watch.self,
        ])
}
