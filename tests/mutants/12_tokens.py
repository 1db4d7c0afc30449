"""Plausible wrong implementations that the hidden tests of notebook 12 must catch, and correct ones written
differently that they must accept.

Each entry maps a description to {solution grade_id: replacement source}.
"""

_TRAIN = '''
def train_bpe(chunks, n_merges):
    from collections import Counter
    words = Counter(tuple(c) for c in chunks)
    merges = []
    for r in range(n_merges):
        counts = Counter()
        for word, n in words.items():
            COUNT
        if not counts:
            break
        best = CHOOSE
        merges.append(best)
        merged = Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(256 + r)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return np.array(merges, dtype=np.int64).reshape(-1, 2)
'''


def _train(count="for pair in zip(word, word[1:]):\n                counts[pair] += n",
           choose="max(counts, key=lambda p: (counts[p], -p[0], -p[1]))"):
    return {"train_bpe": _TRAIN.replace("COUNT", count).replace("CHOOSE", choose)}


_ENCODE = '''
def bpe_encode(ids, merges):
    rank = {(int(a), int(b)): r for r, (a, b) in enumerate(np.asarray(merges).reshape(-1, 2))}
    ids = [int(i) for i in ids]
    BODY
    return np.array(ids, dtype=np.int64)
'''

_WORDPIECE = '''
def wordpiece_tokenize(word, vocab):
    index = {token: i for i, token in reversed(list(enumerate(vocab)))}
    if len(word) LIMIT 100:
        return np.array([index["[UNK]"]], dtype=np.int64)
    ids, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else PREFIX + word[start:end]
            if piece in index:
                break
            end -= 1
        if end == start:
            FAIL
        ids.append(index[piece])
        start = end
    return np.array(ids, dtype=np.int64)
'''


def _wordpiece(limit=">", prefix='"##"', fail='return np.array([index["[UNK]"]], dtype=np.int64)'):
    return {"wordpiece_tokenize": _WORDPIECE.replace("LIMIT", limit).replace("PREFIX", prefix).replace("FAIL", fail)}


MUTANTS = {
    # -- train_bpe -----------------------------------------------------------------------------------------
    "pairs counted once per distinct piece (its multiplicity ignored)":
        _train(count="for pair in zip(word, word[1:]):\n                counts[pair] += 1"),
    "overlapping pairs counted once per piece ((a, a, a) holds (a, a) once)":
        _train(count="for pair in set(zip(word, word[1:])):\n                counts[pair] += n"),
    "ties broken by the first pair found, not the smallest":
        _train(choose="max(counts, key=counts.get)"),
    "ties broken by the largest pair":
        _train(choose="max(counts, key=lambda p: (counts[p], p))"),
    "pairs counted across the pieces of the text (one long sequence)": {"train_bpe": '''
def train_bpe(chunks, n_merges):
    from collections import Counter
    ids = [b for c in chunks for b in c]
    merges = []
    for r in range(n_merges):
        counts = Counter(zip(ids, ids[1:]))
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merges.append(best)
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == best:
                out.append(256 + r)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out
    return np.array(merges, dtype=np.int64).reshape(-1, 2)
'''},
    "always n_merges rows: a pair seen zero times merged when the pieces run out":
        {"train_bpe": _train(choose="max(counts, key=lambda p: (counts[p], -p[0], -p[1])) if counts else (0, 0)")
         ["train_bpe"].replace("        if not counts:\n            break\n", "")},
    "new ids numbered from 255 (off by one)": {"train_bpe": _TRAIN.replace("COUNT", "for pair in zip(word, word[1:]):\n"
                                                                           "                counts[pair] += n")
                                           .replace("CHOOSE", "max(counts, key=lambda p: (counts[p], -p[0], -p[1]))")
                                           .replace("out.append(256 + r)", "out.append(255 + r)")},
    # -- bpe_encode ------------------------------------------------------------------------------------------
    "the leftmost pair that has a merge first, whatever its rank": {"bpe_encode": _ENCODE.replace("BODY", '''while True:
        found = [i for i, pair in enumerate(zip(ids, ids[1:])) if pair in rank]
        if not found:
            break
        i = found[0]
        ids = ids[:i] + [256 + rank[(ids[i], ids[i + 1])]] + ids[i + 2:]''')},
    "the highest rank first": {"bpe_encode": _ENCODE.replace("BODY", '''while True:
        found = [(rank[pair], i) for i, pair in enumerate(zip(ids, ids[1:])) if pair in rank]
        if not found:
            break
        r, i = max(found)
        ids = ids[:i] + [256 + r] + ids[i + 2:]''')},
    "one left-to-right sweep: each pair with a merge replaced as it is met, no second pass": {"bpe_encode": _ENCODE.replace("BODY", '''out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) in rank:
            out.append(256 + rank[(ids[i], ids[i + 1])])
            i += 2
        else:
            out.append(ids[i])
            i += 1
    ids = out''')},
    "every merge applied once, in rank order, to the first occurrence only": {"bpe_encode": _ENCODE.replace("BODY", '''for (a, b), r in sorted(rank.items(), key=lambda item: item[1]):
        for i in range(len(ids) - 1):
            if ids[i] == a and ids[i + 1] == b:
                ids = ids[:i] + [256 + r] + ids[i + 2:]
                break''')},
    "of equal pairs the rightmost first": {"bpe_encode": _ENCODE.replace("BODY", '''while len(ids) >= 2:
        r, i = min((rank.get(pair, np.inf), -i) for i, pair in enumerate(zip(ids, ids[1:])))
        if r == np.inf:
            break
        i = -i
        ids = ids[:i] + [256 + int(r)] + ids[i + 2:]''')},
    "stops after the first merge": {"bpe_encode": _ENCODE.replace("BODY", '''if len(ids) >= 2:
        r, i = min((rank.get(pair, np.inf), i) for i, pair in enumerate(zip(ids, ids[1:])))
        if r != np.inf:
            ids = ids[:i] + [256 + int(r)] + ids[i + 2:]''')},
    # -- wordpiece_tokenize ----------------------------------------------------------------------------------
    "the shortest match first": {"wordpiece_tokenize": '''
def wordpiece_tokenize(word, vocab):
    index = {token: i for i, token in reversed(list(enumerate(vocab)))}
    if len(word) > 100:
        return np.array([index["[UNK]"]], dtype=np.int64)
    ids, start = [], 0
    while start < len(word):
        end = start + 1
        while end <= len(word):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in index:
                break
            end += 1
        if end > len(word):
            return np.array([index["[UNK]"]], dtype=np.int64)
        ids.append(index[piece])
        start = end
    return np.array(ids, dtype=np.int64)
'''},
    "continuations looked up without ##": _wordpiece(prefix='""'),
    "a failing position gives [UNK] for that part and goes on": _wordpiece(
        fail='ids.append(index["[UNK]"])\n            start += 1\n            continue'),
    "a failing word keeps the pieces matched so far, then [UNK]": _wordpiece(
        fail='return np.array(ids + [index["[UNK]"]], dtype=np.int64)'),
    "[UNK] from 100 characters on (>= instead of >)": _wordpiece(limit=">="),
    "no length limit": _wordpiece(limit="> 100 and False and len(word) >"),
    # -- shortest_tokenization -------------------------------------------------------------------------------
    "greedy: the longest token that fits, then the next": {"shortest_tokenization": '''
def shortest_tokenization(data, tokens):
    index = {}
    for i, t in enumerate(tokens):
        index.setdefault(bytes(t), i)
    longest = max(len(t) for t in tokens)
    data, ids, i = bytes(data), [], 0
    while i < len(data):
        for length in range(min(longest, len(data) - i), 0, -1):
            if data[i:i + length] in index:
                ids.append(index[data[i:i + length]])
                i += length
                break
    return np.array(ids, dtype=np.int64)
'''},
    "greedy from the end: the longest token that ends there": {"shortest_tokenization": '''
def shortest_tokenization(data, tokens):
    index = {}
    for i, t in enumerate(tokens):
        index.setdefault(bytes(t), i)
    longest = max(len(t) for t in tokens)
    data, ids, j = bytes(data), [], len(data)
    while j > 0:
        for length in range(min(longest, j), 0, -1):
            if data[j - length:j] in index:
                ids.append(index[data[j - length:j]])
                j -= length
                break
    return np.array(ids[::-1], dtype=np.int64)
'''},
    "the right count, but the ids of single bytes (they do not spell the data)": {"shortest_tokenization": '''
def shortest_tokenization(data, tokens):
    index = {}
    for i, t in enumerate(tokens):
        index.setdefault(bytes(t), i)
    longest = max(len(t) for t in tokens)
    data = bytes(data)
    best = [0] + [None] * len(data)
    for j in range(1, len(data) + 1):
        for length in range(1, min(longest, j) + 1):
            if data[j - length:j] in index and best[j - length] is not None:
                if best[j] is None or best[j - length] + 1 < best[j]:
                    best[j] = best[j - length] + 1
    return np.array([index[bytes([b])] for b in data[:best[len(data)]]], dtype=np.int64)
'''},
    "dynamic programming that only looks one token back (the longest there)": {"shortest_tokenization": '''
def shortest_tokenization(data, tokens):
    index = {}
    for i, t in enumerate(tokens):
        index.setdefault(bytes(t), i)
    longest = max(len(t) for t in tokens)
    data = bytes(data)
    ids, j = [], len(data)
    while j > 0:
        length = max(l for l in range(1, min(longest, j) + 1) if data[j - l:j] in index)
        ids.append(index[data[j - length:j]])
        j -= length
    return np.array(ids[::-1], dtype=np.int64)
'''},
}

# Correct implementations written otherwise: they must pass.
ALTERNATIVES = {
    "train_bpe over every piece, no Counter, recounted from scratch": {"train_bpe": '''
def train_bpe(chunks, n_merges):
    seqs = [list(c) for c in chunks]
    merges = []
    for r in range(n_merges):
        counts = {}
        for s in seqs:
            for k in range(len(s) - 1):
                counts[(s[k], s[k + 1])] = counts.get((s[k], s[k + 1]), 0) + 1
        if not counts:
            break
        top = max(counts.values())
        pair = min(p for p, n in counts.items() if n == top)
        merges.append(pair)
        for s in seqs:
            k = 0
            while k < len(s) - 1:
                if (s[k], s[k + 1]) == pair:
                    s[k:k + 2] = [256 + r]
                k += 1
    return np.array(merges, dtype=np.int64).reshape(-1, 2)
'''},
    "bpe_encode: every merge in rank order, each over the whole sequence": {"bpe_encode": '''
def bpe_encode(ids, merges):
    ids = [int(i) for i in ids]
    for r, (a, b) in enumerate(np.asarray(merges).reshape(-1, 2).tolist()):
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                out.append(256 + r)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out
    return np.array(ids, dtype=np.int64)
'''},
    "wordpiece_tokenize trying prefixes from the longest with slices of the word": {"wordpiece_tokenize": '''
def wordpiece_tokenize(word, vocab):
    ids_of = {}
    for i, t in enumerate(vocab):
        ids_of.setdefault(t, i)
    if len(word) > 100:
        return np.array([ids_of["[UNK]"]])
    out, rest, first = [], word, True
    while rest:
        for cut in range(len(rest), 0, -1):
            key = rest[:cut] if first else "##" + rest[:cut]
            if key in ids_of:
                out.append(ids_of[key])
                rest, first = rest[cut:], False
                break
        else:
            return np.array([ids_of["[UNK]"]])
    return np.array(out, dtype=int)
'''},
    "shortest_tokenization by a shortest path over the positions (breadth first)": {"shortest_tokenization": '''
def shortest_tokenization(data, tokens):
    from collections import deque
    data = bytes(data)
    ids_of = {}
    for i, t in enumerate(tokens):
        ids_of.setdefault(bytes(t), i)
    longest = max(len(t) for t in tokens)
    came_from = {0: None}
    queue = deque([0])
    while queue:
        i = queue.popleft()
        for j in range(i + 1, min(i + longest, len(data)) + 1):
            if j not in came_from and data[i:j] in ids_of:
                came_from[j] = (i, ids_of[data[i:j]])
                queue.append(j)
    out, j = [], len(data)
    while j:
        i, t = came_from[j]
        out.append(t)
        j = i
    return np.array(out[::-1], dtype=np.int64)
'''},
}
