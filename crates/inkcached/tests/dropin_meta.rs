//! Meta commands and bad input, byte for byte against stock memcached 1.6 (issue 15): both
//! servers started fresh by each test, each script on its own connection.

mod common;
use common::*;

#[test]
fn meta_vivify_and_recache_win_tokens() {
    assert_same(
        &[],
        &[
            // N on a miss: an empty item, the win token, answered even with q
            "mg {}a N30 s t\r\nmg {}a N30 s t\r\nmg {}a s t v\r\n",
            "mg {}b N30 q s t\r\nmg {}b N30 q s t\r\n",
            "mg {}c N30 s t v c f k O123\r\nms {}c 2 T60\r\nhi\r\nmg {}c s v\r\n",
            // R: win when the TTL left is below the token's, once
            "ms {}d 2 T10\r\nhi\r\nmg {}d R30 t\r\nmg {}d R30 t\r\nmg {}d R5 t\r\n",
            "ms {}e 2\r\nhi\r\nmg {}e R30 t\r\n",
            // vivify then a later set: the token holder stores
            "mg {}f N30 c\r\nms {}f 3 C1\r\nabc\r\n",
        ],
    );
}

#[test]
fn meta_stale_items() {
    assert_same(
        &[],
        &[
            // md I: stale (X), the next fetch wins (W) and the one after sees Z
            "ms {}a 2\r\nhi\r\nmd {}a I\r\nmg {}a s t c v\r\nmg {}a s t v\r\nmg {}a v\r\n",
            "ms {}b 2 T100\r\nhi\r\nmd {}b I T30\r\nmg {}b t\r\n",
            "md {}c I\r\nmd {}c I q\r\n",
            // ms with a lower CAS and I stores stale, keeping the TTL; a higher one is EX
            "ms {}d 2 T90\r\nhi\r\nmd {}d I\r\nms {}d 2 C1 I T5\r\nho\r\nmg {}d v t\r\nms {}d 2 C999999 I\r\nhu\r\n",
            // the right CAS on a stale item stores a fresh one
            "ms {}e 2\r\nhi\r\nmg {}e c\r\nmd {}e I q\r\nmg {}e c\r\n",
            "ms {}f 2 I\r\nhi\r\nmg {}f v\r\n",
        ],
    );
}

#[test]
fn meta_cas_hits_and_flags_order() {
    assert_same(
        &[],
        &[
            // EX with c0 when the CAS is wrong and c is asked
            "ms {}a 2\r\nhi\r\nms {}a 2 C99999 c\r\nyo\r\nms {}a 2 C99999 c q k\r\nyo\r\n",
            "ms {}b 2\r\nhi\r\nmg {}b c\r\nms {}b 2 C2 c\r\nyo\r\nmd {}b C1\r\nmd {}b C1 q\r\n",
            "ma {}c C5\r\nms {}c 1\r\n5\r\nma {}c C1 v\r\n",
            // h and l: fetched before, seconds since the last access, before this fetch's bump
            "ms {}d 2\r\nhi\r\nmg {}d h l\r\nmg {}d h l t\r\nmg {}d u h\r\n",
            "ms {}e 2\r\nhi\r\nmg {}e u h\r\nmg {}e h\r\nmg {}e h\r\n",
            // flags answered in the order asked
            "ms {}f 5 F9 T0\r\nhello\r\nmg {}f t f s c k O1 v\r\nmg {}f O1 k c s f t\r\n",
            "ms {}g 2 k O9 c\r\nhi\r\nms {}g 2 c O9 k q\r\nhi\r\n",
            "md {}h k O7\r\nma {}h k O7\r\nmg {}h k O7\r\nmg {}h k O7 q\r\n",
            // T on a hit counts as a touch; modes of ms
            "ms {}i 2\r\nhi\r\nmg {}i T30 t\r\nms {}i 2 ME\r\nxx\r\nms {}i 2 MA\r\nyy\r\nms {}i 2 MP\r\nzz\r\nms {}i 2 MR\r\nab\r\nms {}nx 2 MR\r\nab\r\nms {}nx 2 MA\r\nab\r\nmg {}i v\r\n",
            "ma {}j N0 J7 v t\r\nma {}j MD D3 v\r\nma {}j M- v\r\nma {}j M+ D10 v c t\r\nma {}j q\r\nma {}j q v\r\nma {}nx q\r\n",
            "ma {}k N100 J1 T5 t\r\nma {}k t T0 t\r\n",
            "me {}l\r\nms {}l 2 T100 F3\r\nhi\r\nme {}l\r\nmg {}l\r\nme {}l\r\n",
        ],
    );
}

#[test]
fn meta_errors() {
    assert_same(
        &[],
        &[
            // invalid and repeated flags, per command
            "mg {}a v v\r\nmg {}a x\r\nmg {}a Tx\r\nmg {}a N\r\nmg {}a Fx\r\nmg {}a MSS\r\n",
            "md {}a x\r\nmd {}a q q\r\nma {}a x\r\nma {}a Dx\r\nma {}a Jx\r\nma {}a MX\r\nma {}a Mxx\r\n",
            // ms errors swallow the data block; bad lengths do not
            "ms {}b 2 x\r\nhi\r\nms {}b 2 v v\r\nhi\r\nms {}b 2 MX\r\nhi\r\nms {}b 2 Cx\r\nhi\r\nmg {}b v\r\n",
            "ms {}c S2\r\nms {}c\r\nms {}c -1\r\nms {}c 2147483647\r\nms {}c 2 b\r\nhi\r\n",
            "ms {}d 3\r\nhi\r\nmg {}d v\r\n",
            // opaque tokens: 31 bytes echoed, longer refused
            "mg {}e O1234567890123456789012345678901 k\r\nmg {}e O12345678901234567890123456789012\r\n",
            "ms {}e 2 O12345678901234567890123456789012\r\nhi\r\nmg {}e v\r\n",
            "md {}e O12345678901234567890123456789012\r\nma {}e N0 O12345678901234567890123456789012\r\nmg {}e v\r\n",
            "ms {}f 2\r\nhi\r\nmg {}f v O12345678901234567890123456789012\r\n",
            // too many flags
            "mg {}g a b c d e f g h i j k l m n o p q r\r\nmg {}g v f t s c k O1 q h l u\r\n",
            "ms {}g 2 a b c d e f g h i j k l m n o p q\r\nhi\r\n",
            "mx {}h\r\nm\r\nme\r\nme {}h b\r\nme {}h x y\r\n",
            // base64 keys
            "ms a2V5{} 2 b\r\nhi\r\nms a2V5 2 b k c\r\nhi\r\nmg a2V5 b k v\r\nmg a2V5 k v\r\nme a2V5 b\r\nmd a2V5 b q\r\nmg a2V5 b\r\nmg *** b\r\n",
        ],
    );
}

#[test]
fn bad_input_answers() {
    assert_same(
        &[],
        &[
            // an absurd length is a bad line, and nothing after it is swallowed
            "set {}a 0 0 2147483647\r\nget {}a\r\n",
            "set {}b 0 0 4294967299\r\nabc\r\nget {}b\r\nset {}c 0 4294967296 1\r\nx\r\nget {}c\r\n",
            "set {}d 0 0 3 noreply\r\nabcdef\r\nget {}d\r\n",
            // verbosity takes a number
            "verbosity invalid\r\nverbosity 0\r\nverbosity\r\nverbosity x noreply\r\nverbosity 1 2\r\nverbosity 0\r\n",
            // shutdown without -A
            "shutdown\r\nshutdown graceful\r\nshutdown foo\r\n",
            // flush_all arguments
            "flush_all 10 20\r\nflush_all x\r\nflush_all x noreply\r\nflush_all 0\r\nflush_all -1\r\n",
            "gets\r\ngat\r\ngat 10\r\nbget {}x\r\nincr {}x 1 2 3\r\ndecr\r\n",
            "cache_memlimit\r\nslabs\r\nlru\r\nlru_crawler\r\nwatch x\r\nstats detail\r\n",
            "get a b c d e f g h i j k l m n o p q r s t u v w x y z 1 2 3\r\n",
        ],
    );
}

#[test]
fn http_requests_close_the_connection() {
    assert_same(
        &[],
        &[
            "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            "POST /x HTTP/1.0\r\n",
            "HEAD /index.html HTTP/1.1\r\n",
            "get {}k\r\nPUT /a HTTP/1.1\r\n",
            "set {}k 0 0 1\r\nx\r\nGET / HTTP/1.1\r\n",
            // only lines no command letter claims
            "sGET / HTTP/1.1\r\n",
            "get / HTTP/1.1\r\n",
            "delete / HTTP/1.1\r\n",
        ],
    );
}
