/// What the broker tells the world, one case per kind of announcement. The broker hands each
/// change's events, together, to its one announcer (the `announce` its initializer takes), and
/// brokerd turns them into signals and properties in one exhaustive switch: a new case does not
/// compile until it is given its place on the bus.
public enum BrokerEvent: Sendable, Equatable {
    /// The device's account changed (`AccountChanged`, the `CurrentAccount` property).
    case accountChanged(DeviceAccountChange)
    /// A warning of a sign-out the person did not ask for started, was cancelled or ended
    /// (`SignOutPending`, `SignOutCancelled`, the `SignOutDeadline` property).
    case shiftWarning(ShiftWarning)
    /// An interactive sign-in reached a stage, for its owner alone (`SignInProgress`).
    case signInProgress(SignInProgressReport)
}
