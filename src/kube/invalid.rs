//! The one error of a spec that cannot be acted on as it is: every controller reports it the
//! same way (a Degraded condition with `reason`, and a Warning Event), and waits for the user.

/// A spec (or a Secret it names) that cannot be acted on: a missing Secret, an unusable
/// certificate, a field not implemented. The message names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// The condition's and the Event's reason, e.g. `SecretNotFound`.
    pub reason: &'static str,
    /// What is wrong, naming the field.
    pub message: String,
}
