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
use std::ops::Range;

use bytes::{Bytes, BytesMut};

/// A block's size. A piece that needs more gets a buffer of its own size, which the thread
/// drops at the cut: the thread's buffer is never more than a block, so a small piece kept
/// long never pins more.
const BLOCK: usize = 4096;

thread_local! {
    static ARENA: RefCell<Block> = RefCell::new(Block::new());
}

/// The thread's buffer, and the addresses of the block it is cut from.
pub struct Block {
    buf: BytesMut,
    /// While `buf`'s bytes lie in here it is that block's; a piece that grew past the room it
    /// asked for moved them to a larger buffer, which is not kept after the cut.
    block: Range<usize>,
}

impl Block {
    fn new() -> Self {
        let buf = BytesMut::with_capacity(BLOCK);
        let start = buf.as_ptr() as usize;
        Self { block: start..start + buf.capacity(), buf }
    }

    /// A buffer of its own for a piece larger than a block.
    fn own(capacity: usize) -> Self {
        Self { buf: BytesMut::with_capacity(capacity), block: 0..0 }
    }

    fn in_block(&self) -> bool {
        let at = self.buf.as_ptr() as usize;
        self.block.start <= at && at <= self.block.end
    }
}

/// A turn at the thread's buffer: bytes appended with [`Arena::room`]'s buffer become a piece
/// at [`Arena::cut`].
pub struct Arena<'a>(&'a mut Block);

impl Arena<'_> {
    /// The buffer, with at least `n` bytes free after what is appended so far. When the block
    /// has less, what is pending moves to a new block, or to a buffer of its own if it and `n`
    /// need more than a block.
    pub fn room(&mut self, n: usize) -> &mut BytesMut {
        let pending = self.0.buf.len();
        if self.0.buf.capacity() - pending < n {
            let need = pending + n;
            let mut next = if need <= BLOCK { Block::new() } else { Block::own(need) };
            next.buf.extend_from_slice(&self.0.buf);
            *self.0 = next;
        }
        &mut self.0.buf
    }

    /// The bytes appended since the last cut.
    pub fn len(&self) -> usize {
        self.0.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What was appended since the last cut, as a piece; `None` if nothing was.
    pub fn cut(&mut self) -> Option<Bytes> {
        if self.0.buf.is_empty() {
            return None;
        }
        let piece = self.0.buf.split().freeze();
        if !self.0.in_block() {
            *self.0 = Block::new();
        }
        Some(piece)
    }
}

/// Run `f` with the thread's buffer. What `f` appends and does not cut is dropped, also when
/// `f` panics (a response body's poll can): a turn starts empty, so no byte of one response can
/// lead another's. A turn inside a turn (a response body that reads a request's trailers
/// could start one) gets a buffer of its own.
pub fn with<R>(f: impl FnOnce(&mut Arena<'_>) -> R) -> R {
    let mut f = Some(f);
    let ran = ARENA.try_with(|arena| {
        let mut block = arena.try_borrow_mut().ok()?;
        block.buf.clear();
        let f = f.take()?;
        Some(f(&mut Arena(&mut block)))
    });
    match (ran, f) {
        (Ok(Some(r)), _) => r,
        // Inside a turn already, or the thread's storage gone (a task dropped as its thread ends).
        (_, Some(f)) => f(&mut Arena(&mut Block::own(0))),
        (_, None) => unreachable!("a turn that ran returned its result"),
    }
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
    fn a_piece_larger_than_a_block_does_not_leave_the_thread_a_larger_buffer() {
        // A turn that outgrows its room (a long head) and one that asks for more than a block.
        let grown = with(|arena| {
            arena.room(16).extend_from_slice(&[1; 3 * BLOCK]);
            arena.cut().unwrap()
        });
        let big = with(|arena| {
            arena.room(2 * BLOCK).extend_from_slice(&[2; 2 * BLOCK]);
            arena.cut().unwrap()
        });
        assert!(grown.iter().all(|&x| x == 1) && grown.len() == 3 * BLOCK);
        assert!(big.iter().all(|&x| x == 2) && big.len() == 2 * BLOCK);
        // The next small pieces come from a block of BLOCK bytes, not from either buffer.
        let small: Vec<Bytes> = (0..3)
            .map(|_| {
                with(|arena| {
                    arena.room(10).extend_from_slice(b"0123456789");
                    arena.cut().unwrap()
                })
            })
            .collect();
        ARENA.with_borrow(|block| assert_eq!(block.block.len(), BLOCK));
        for piece in &small {
            let at = piece.as_ptr() as usize;
            ARENA.with_borrow(|block| assert!(block.block.contains(&at)));
        }
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
