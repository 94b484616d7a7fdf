//! [`Args`]: every argument of a call, for a typed service or host function that takes them
//! all. The other argument types ([`FromMessage`]) read one argument, or a tuple of them.

use std::ops::Deref;

use super::{ConvertError, FromMessage, IntoMessage, Message};

/// Every argument of a call, in order: the argument type of a service or
/// [typed host function](crate::Plan::typed_function) that takes them all, however many there
/// are. A [`Message`] argument type takes the first argument alone, and a tuple takes them by
/// position.
///
/// It derefs to the arguments' slice, and its field is public: `|Args(args): Args|` takes the
/// `Vec` itself.
///
/// ```
/// use skein::message::Args;
/// use skein::{DomainSpec, Message, Pool, ScriptDomain};
///
/// let pool = Pool::new(1);
/// let domain = ScriptDomain::new(&pool, DomainSpec::new("main"))?;
/// domain.register_query("count", |args: Args| Ok(args.len()))?;
/// domain.register_query("first", |first: Message| Ok(first))?;
/// assert_eq!(domain.eval("return count(1, 'two', nil, 4)")?, Message::Number(4.0));
/// assert_eq!(domain.eval("return count()")?, Message::Number(0.0));
/// assert_eq!(domain.eval("return first(1, 'two')")?, Message::Number(1.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Args(pub Vec<Message>);

impl Args {
    /// The arguments, without a copy.
    pub fn into_vec(self) -> Vec<Message> {
        self.0
    }
}

impl Deref for Args {
    type Target = [Message];

    fn deref(&self) -> &[Message] {
        &self.0
    }
}

impl From<Vec<Message>> for Args {
    fn from(args: Vec<Message>) -> Args {
        Args(args)
    }
}

impl IntoIterator for Args {
    type Item = Message;
    type IntoIter = std::vec::IntoIter<Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Args {
    type Item = &'a Message;
    type IntoIter = std::slice::Iter<'a, Message>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A call's arguments whole; one value read as `Args` is a list's items.
impl FromMessage for Args {
    fn from_message(message: Message) -> Result<Self, ConvertError> {
        Vec::<Message>::from_message(message).map(Args)
    }

    fn from_args(args: Vec<Message>) -> Result<Self, ConvertError> {
        Ok(Args(args))
    }
}

/// A list of the arguments.
impl IntoMessage for Args {
    fn into_message(self) -> Result<Message, ConvertError> {
        Ok(Message::List(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_take_every_argument_and_a_message_the_first() {
        let call = || vec![Message::from(1), Message::from("two"), Message::Nil];
        assert_eq!(Args::from_args(call()), Ok(Args(call())));
        assert_eq!(Args::from_args(Vec::new()), Ok(Args::default()));
        assert_eq!(Message::from_args(call()), Ok(Message::from(1)));
        assert_eq!(Message::from_args(Vec::new()), Ok(Message::Nil));
        // Nested, an `Args` is a list's items.
        let (first, rest) = <(Message, Args)>::from_args(vec![
            Message::from(1),
            Message::list([Message::from(2), Message::from(3)]),
        ])
        .unwrap();
        assert_eq!(first, Message::from(1));
        assert_eq!(rest.into_vec(), vec![Message::from(2), Message::from(3)]);
        let err = <(Message, Args)>::from_args(vec![Message::Nil, Message::from(2)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "args[2]: expected a list, got the number 2"
        );
    }
}
