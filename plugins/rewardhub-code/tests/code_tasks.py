"""Twenty small HumanEval-style tasks, each with a correct and a wrong solution.

Fourteen are assert-style (``ground_truth`` a list of asserts, or HumanEval's ``check``), six read
standard input and print (``ground_truth`` ``{"inputs", "outputs"}``). The wrong solutions are the
plausible kind of mistake a model makes: an off-by-one, a missed edge case, the wrong order.
"""

from __future__ import annotations

from typing import Any


def fenced(code: str, lang: str = "python") -> str:
    """A response the way a chat model writes it: a sentence, then the program in a fence."""
    return f"Here is my solution.\n\n```{lang}\n{code.strip()}\n```\n\nIt handles the edge cases."


#: (id, ground_truth, correct program, wrong program)
TASKS: list[tuple[str, Any, str, str]] = [
    (
        "add",
        ["assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(0, 0) == 0"],
        "def add(a, b):\n    return a + b",
        "def add(a, b):\n    return a - b",
    ),
    (
        "is_palindrome",
        [
            "assert is_palindrome('racecar')",
            "assert is_palindrome('')",
            "assert not is_palindrome('ab')",
            "assert is_palindrome('A man a plan a canal Panama'.replace(' ', '').lower())",
        ],
        "def is_palindrome(s):\n    return s == s[::-1]",
        "def is_palindrome(s):\n    return s[0] == s[-1]",
    ),
    (
        "fizzbuzz",
        [
            "assert fizzbuzz(3) == 'Fizz'",
            "assert fizzbuzz(5) == 'Buzz'",
            "assert fizzbuzz(15) == 'FizzBuzz'",
            "assert fizzbuzz(7) == '7'",
        ],
        "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n    if n % 3 == 0:\n        "
        "return 'Fizz'\n"
        "    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)",
        "def fizzbuzz(n):\n    if n % 3 == 0:\n        return 'Fizz'\n    if n % 5 == 0:\n        return "
        "'Buzz'\n"
        "    if n % 15 == 0:\n        return 'FizzBuzz'\n    return str(n)",
    ),
    (
        "has_close_elements",  # HumanEval/0, in its own format
        {
            "entry_point": "has_close_elements",
            "test": "def check(candidate):\n"
            "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) is True\n"
            "    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) is False\n"
            "    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) is True\n"
            "    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) is True\n"
            "    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 0.5) is False\n",
        },
        "def has_close_elements(numbers, threshold):\n    s = sorted(numbers)\n"
        "    return any(b - a < threshold for a, b in zip(s, s[1:]))",
        "def has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for a, b in zip(numbers, numbers[1:]))",
    ),
    (
        "fib",
        ["assert fib(0) == 0", "assert fib(1) == 1", "assert fib(10) == 55", "assert fib(50) == 12586269025"],
        "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        "def fib(n):\n    a, b = 1, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    ),
    (
        "is_prime",
        [
            "assert is_prime(2)",
            "assert is_prime(97)",
            "assert not is_prime(1)",
            "assert not is_prime(91)",
            "assert not is_prime(0)",
        ],
        "def is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n"
        "        if n % i == 0:\n            return False\n        i += 1\n    return True",
        "def is_prime(n):\n    return all(n % i for i in range(2, n))",
    ),
    (
        "reverse_words",
        [
            "assert reverse_words('hello world') == 'world hello'",
            "assert reverse_words('a') == 'a'",
            "assert reverse_words('  one   two ') == 'two one'",
        ],
        "def reverse_words(s):\n    return ' '.join(reversed(s.split()))",
        "def reverse_words(s):\n    return ' '.join(reversed(s.split(' ')))",
    ),
    (
        "count_vowels",
        [
            "assert count_vowels('hello') == 2",
            "assert count_vowels('AEIOU') == 5",
            "assert count_vowels('xyz') == 0",
        ],
        "def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)",
        "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)",
    ),
    (
        "flatten",
        [
            "assert flatten([1, [2, [3, [4]]], 5]) == [1, 2, 3, 4, 5]",
            "assert flatten([]) == []",
            "assert flatten([[[]]]) == []",
        ],
        "def flatten(xs):\n    out = []\n    for x in xs:\n        if isinstance(x, list):\n"
        "            out.extend(flatten(x))\n        else:\n            out.append(x)\n    return out",
        "def flatten(xs):\n    out = []\n    for x in xs:\n        if isinstance(x, list):\n"
        "            out.extend(x)\n        else:\n            out.append(x)\n    return out",
    ),
    (
        "two_sum",
        {
            "setup": "def _ok(f, xs, t):\n    i, j = f(xs, t)\n    return i != j and xs[i] + xs[j] == t\n",
            "tests": [
                "assert _ok(two_sum, [2, 7, 11, 15], 9)",
                "assert _ok(two_sum, [3, 2, 4], 6)",
                "assert _ok(two_sum, [3, 3], 6)",
            ],
        },
        "def two_sum(nums, target):\n    seen = {}\n    for i, x in enumerate(nums):\n"
        "        if target - x in seen:\n            return seen[target - x], i\n        seen[x] = i",
        "def two_sum(nums, target):\n    for i, x in enumerate(nums):\n        for j, y in enumerate(nums):\n"
        "            if x + y == target:\n                return i, j",
    ),
    (
        "balanced",
        [
            "assert balanced('([]{})')",
            "assert not balanced('(]')",
            "assert not balanced('((')",
            "assert balanced('')",
            "assert not balanced(')(')",
        ],
        "def balanced(s):\n    pairs = {')': '(', ']': '[', '}': '{'}\n    stack = []\n    for c in s:\n"
        "        if c in '([{':\n            stack.append(c)\n        elif c in pairs:\n"
        "            if not stack or stack.pop() != pairs[c]:\n                return False\n    return not "
        "stack",
        "def balanced(s):\n    return s.count('(') == s.count(')') and s.count('[') == s.count(']')",
    ),
    (
        "roman",
        ["assert roman(1994) == 'MCMXCIV'", "assert roman(4) == 'IV'", "assert roman(3999) == 'MMMCMXCIX'"],
        "def roman(n):\n    vals = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, "
        "'XC'),\n"
        "            (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n"
        "    out = ''\n    for v, s in vals:\n        while n >= v:\n            out += s\n            n -= "
        "v\n"
        "    return out",
        "def roman(n):\n    vals = [(1000, 'M'), (500, 'D'), (100, 'C'), (50, 'L'), (10, 'X'), (5, 'V'), (1, "
        "'I')]\n"
        "    out = ''\n    for v, s in vals:\n        while n >= v:\n            out += s\n            n -= "
        "v\n"
        "    return out",
    ),
    (
        "merge_sorted",
        [
            "assert merge_sorted([1, 3, 5], [2, 4]) == [1, 2, 3, 4, 5]",
            "assert merge_sorted([], [1]) == [1]",
            "assert merge_sorted([1, 1], [1]) == [1, 1, 1]",
        ],
        "def merge_sorted(a, b):\n    i = j = 0\n    out = []\n    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        else:\n"
        "            out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]",
        "def merge_sorted(a, b):\n    return sorted(set(a) | set(b))",
    ),
    (
        "run_length",
        [
            "assert run_length('aaabcc') == 'a3b1c2'",
            "assert run_length('') == ''",
            "assert run_length('z') == 'z1'",
        ],
        "import itertools\n\ndef run_length(s):\n"
        "    return ''.join(f'{k}{len(list(g))}' for k, g in itertools.groupby(s))",
        "def run_length(s):\n    return ''.join(f'{c}{s.count(c)}' for c in dict.fromkeys(s))[:-1]",
    ),
    # ---- stdin / stdout
    (
        "sum_numbers_io",
        {"inputs": ["3\n1 2 3\n", "1\n-5\n", "4\n10 20 30 40\n"], "outputs": ["6\n", "-5\n", "100\n"]},
        "n = int(input())\nprint(sum(map(int, input().split())))",
        "n = int(input())\nprint(sum(map(int, input().split()[1:])))",
    ),
    (
        "max_min_io",
        [{"input": "5 1 9 3\n", "output": "9 1\n"}, {"input": "-2 -8\n", "output": "-2 -8\n"}],
        "xs = list(map(int, input().split()))\nprint(max(xs), min(xs))",
        "xs = input().split()\nprint(max(xs), min(xs))",
    ),
    (
        "word_count_io",
        {"inputs": ["the cat the dog\n", "a b a b a\n"], "outputs": ["cat 1\ndog 1\nthe 2\n", "a 3\nb 2\n"]},
        "import collections, sys\nc = collections.Counter(sys.stdin.read().split())\n"
        "for w in sorted(c):\n    print(w, c[w])",
        "import collections, sys\nc = collections.Counter(sys.stdin.read().split())\n"
        "for w, n in c.most_common():\n    print(w, n)",
    ),
    (
        "gcd_io",
        {"inputs": ["12 18\n", "7 13\n", "0 5\n"], "outputs": ["6\n", "1\n", "5\n"]},
        "import math\na, b = map(int, input().split())\nprint(math.gcd(a, b))",
        "a, b = map(int, input().split())\nprint(min(a, b))",
    ),
    (
        "matrix_transpose_io",
        {"inputs": ["2 3\n1 2 3\n4 5 6\n"], "outputs": ["1 4\n2 5\n3 6\n"]},
        "r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\n"
        "for row in zip(*m):\n    print(' '.join(row))",
        "r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\n"
        "for row in m:\n    print(' '.join(row))",
    ),
    (
        "sort_lines_io",
        {"inputs": ["3\npear\napple\nfig\n", "1\nsolo\n"], "outputs": ["apple\nfig\npear\n", "solo\n"]},
        "import sys\nn = int(sys.stdin.readline())\nlines = [sys.stdin.readline().strip() for _ in "
        "range(n)]\n"
        "print('\\n'.join(sorted(lines)))",
        "import sys\nn = int(sys.stdin.readline())\nlines = [sys.stdin.readline().strip() for _ in "
        "range(n)]\n"
        "print('\\n'.join(sorted(lines, key=len)))",
    ),
]
