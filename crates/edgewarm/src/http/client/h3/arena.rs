//! A worker thread's buffer for the bytes the HTTP/3 layer makes: response frames, and the
//! Huffman-decoded strings of request heads. Each is cut from a shared block instead of taking
//! an allocation of its own, and a cut piece is `Bytes` that quinn-proto keeps as it is given
//! (it would copy a slice).
//!
//! A block is freed once the last piece cut from it is. A piece kept long (a header value while
//! its origin is slow, a response its client has not acknowledged) pins at most one block, so
//! blocks are small: a page, the order of what quinn-proto and the request's own task already
//! keep for each stream. A block no piece refers to any more is used again in place.

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};

/// A block's size; a piece larger than this gets a buffer of its own size.
const BLOCK: usize = 4096;

thread_local! {
    static ARENA: RefCell<BytesMut> = RefCell::new(BytesMut::with_capacity(BLOCK));
}

/// A turn at the thread's buffer: bytes appended with [`Arena::room`]'s buffer become a piece
/// at [`Arena::cut`].
pub(super) struct Arena<'a>(&'a mut BytesMut);

impl Arena<'_> {
    /// The buffer, with at least `n` bytes free after what is appended so far (that part moves
    /// to a new block with it if this one is full).
    pub(super) fn room(&mut self, n: usize) -> &mut BytesMut {
        if self.0.capacity() - self.0.len() < n {
            self.0.reserve(n.max(BLOCK));
        }
        self.0
    }

    /// The bytes appended since the last cut.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// What was appended since the last cut, as a piece; `None` if nothing was.
    pub(super) fn cut(&mut self) -> Option<Bytes> {
        (!self.0.is_empty()).then(|| self.0.split().freeze())
    }
}

/// Run `f` with the thread's buffer. What `f` appends and does not cut is dropped, also when
/// `f` panics (a response body's poll can): a turn starts empty, so no byte of one response can
/// lead another's. Should `f` reach here again (none of its callers does), the inner turn gets
/// a buffer of its own.
pub(super) fn with<R>(f: impl FnOnce(&mut Arena<'_>) -> R) -> R {
    ARENA.with(|arena| match arena.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            f(&mut Arena(&mut buf))
        }
        Err(_) => f(&mut Arena(&mut BytesMut::new())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_share_a_block_until_it_is_full_and_keep_their_bytes() {
        let (a, b) = with(|arena| {
            arena.room(3).extend_from_slice(b"abc");
            let a = arena.cut().unwrap();
            arena.room(2).extend_from_slice(b"de");
            (a, arena.cut().unwrap())
        });
        assert_eq!((&a[..], &b[..]), (&b"abc"[..], &b"de"[..]));
        // One block: the second piece starts where the first ends.
        assert_eq!(a.as_ptr().wrapping_add(3), b.as_ptr());
        // Pieces larger than a block, and many of them, each keep their own bytes.
        let big: Vec<Bytes> = (0..20u8)
            .map(|i| {
                with(|arena| {
                    let n = 1000 * usize::from(i);
                    arena.room(n).extend_from_slice(&vec![i; n]);
                    arena.cut().unwrap_or_default()
                })
            })
            .collect();
        for (i, piece) in (0..20u8).zip(&big) {
            assert!(piece.len() == 1000 * usize::from(i) && piece.iter().all(|&x| x == i));
        }
        assert_eq!((&a[..], &b[..]), (&b"abc"[..], &b"de"[..]));
        assert_eq!(with(|arena| arena.cut()), None);
    }

    #[test]
    fn a_turn_inside_a_turn_has_a_buffer_of_its_own() {
        let (outer, inner) = with(|arena| {
            arena.room(1).extend_from_slice(b"o");
            let inner = with(|arena| {
                arena.room(1).extend_from_slice(b"i");
                arena.cut()
            });
            (arena.cut(), inner)
        });
        assert_eq!((outer.as_deref(), inner.as_deref()), (Some(&b"o"[..]), Some(&b"i"[..])));
    }

    #[test]
    fn what_is_not_cut_is_dropped() {
        with(|arena| arena.room(4).extend_from_slice(b"left"));
        let panicked = std::panic::catch_unwind(|| {
            with(|arena| {
                arena.room(5).extend_from_slice(b"stray");
                panic!("a body's poll panicked mid-turn");
            })
        });
        assert!(panicked.is_err());
        let piece = with(|arena| {
            arena.room(2).extend_from_slice(b"ok");
            arena.cut()
        });
        assert_eq!(piece.as_deref(), Some(&b"ok"[..]));
    }
}
