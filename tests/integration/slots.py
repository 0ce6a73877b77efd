"""slots.py - where a user's keys live in a Redis Cluster, for the tests:
the key layout of src/model/keys.c (<prefix>{<action>:<escaped user>}:<suffix>),
the hash slot of a key (CRC16 of its hash tag, as CLUSTER KEYSLOT), and
users whose keys fall in given slots."""

NSLOTS = 16384

def _crc16_table():
    t = []
    for i in range(256):
        c = i << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) if c & 0x8000 else (c << 1)
        t.append(c & 0xFFFF)
    return t


_CRC_TABLE = _crc16_table()


def crc16(data):
    """CRC16/XMODEM as Redis Cluster uses it (poly 0x1021, init 0)."""
    if isinstance(data, str):
        data = data.encode()
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[((crc >> 8) ^ b) & 0xFF]
    return crc


assert crc16(b"123456789") == 0x31C3


def hash_tag(key):
    """The part of a key that is hashed: the bytes between the first '{' and
    the first '}' after it when non-empty, else the whole key."""
    if isinstance(key, str):
        key = key.encode()
    i = key.find(b"{")
    if i >= 0:
        j = key.find(b"}", i + 1)
        if j > i + 1:
            return key[i + 1:j]
    return key


def key_slot(key):
    return crc16(hash_tag(key)) % NSLOTS


def esc_user(user):
    if isinstance(user, str):
        user = user.encode()
    return user.replace(b"%", b"%25").replace(b"}", b"%7D")


def user_tag(action, user):
    """The hash tag of every key of (user, action): b"<action>:<escaped user>"."""
    if isinstance(action, str):
        action = action.encode()
    return action + b":" + esc_user(user)


def user_slot(action, user):
    return crc16(user_tag(action, user)) % NSLOTS


def user_key(action, user, suffix, prefix="rl:"):
    """The daemon's key for a limit of (user, action): suffix "s60000" or "f"."""
    return prefix.encode() + b"{" + user_tag(action, user) + b"}:" + suffix.encode()


def users_in_slots(action, slots, count, name="u", start=0):
    """count user names (str) whose slot for `action` is in `slots` (a set or
    range), searching name0, name1, ... The search costs about
    16384/len(slots) tries per user."""
    slots = slots if isinstance(slots, (set, frozenset, range)) else set(slots)
    out = []
    i = start
    while len(out) < count:
        u = "%s%d" % (name, i)
        if user_slot(action, u) in slots:
            out.append(u)
        i += 1
        if i - start > 50000000:
            raise AssertionError("no users found for those slots")
    return out


def one_user_per_slot(action, slots, name="s"):
    """{slot: user} with one user for each slot of `slots` (by brute force;
    fine for a few hundred slots)."""
    want = set(slots)
    out = {}
    i = 0
    while want:
        u = "%s%d" % (name, i)
        s = user_slot(action, u)
        if s in want:
            out[s] = u
            want.discard(s)
        i += 1
    return out
