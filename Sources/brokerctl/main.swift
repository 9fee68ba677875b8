import BrokerctlCore
import Glibc

// brokerctl: the plain reads answered here, as soon as the program starts; every other command
// by brokerctl-commands, run in this process's place with the same arguments (CommandsProgram).

if let quick = QuickCommand.recognize(Array(CommandLine.arguments.dropFirst())) {
    exit(quick.run())
}
CommandsProgram.run(CommandLine.unsafeArgv)
