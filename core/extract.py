"""Key extraction for memories remembered without keys (plain transcripts, imports).

A small, deterministic method with no model and no new dependency:

- **names**: runs of capitalised words ("Caroline", "New York", "LGBTQ") become `name` keys. A
  capitalised word that opens a sentence counts only when it is not a common word ("The",
  "Yesterday"), so sentence starts do not become names.
- **concepts**: the salient content words (not stopwords or filler, at least 4 letters, not part
  of a name), longest and most repeated first, become `concept` keys.

At most `MAX_NAMES` names and `MAX_CONCEPTS` concepts. The event marks every such key
`extracted=True`, so extracted keys can be told from keys an agent chose.
"""

from __future__ import annotations

import re
import unicodedata

from keytrail.projections.scripts import pattern

from .validation import KeySpec

MAX_NAMES = 4
MAX_CONCEPTS = 4
MIN_CONCEPT_CHARS = 4
#: the longest label extraction makes, below the limit on a key the caller names (200, as an
#: entity's name may be): a longer run of capitalised words is a title or shouted text
MAX_EXTRACTED_CHARS = 100

#: what ends a sentence, and so a name: its punctuation, and a line break (transcripts and
#: notes break lines without any)
_ENDS = ".!?;:\u0964\u0965\n"
#: what ends a name but no sentence: "Luna, Oliver" are two names, "(Mel)" or "Dana / Sam" too,
#: and a hyphen standing alone, the dash a keyboard types ("Books - A way to relax")
_BREAKS = ',()[]{}"“”«»/–—-'
#: Words that are never a name alone, wherever they stand ('"Summer Sounds"- The playing'
#: made a name "The", which every question with "the" in it then matched); in a longer name
#: they stay ("The Hobbit", "Plan A").
_NEVER_A_NAME_WORDS = """
    a an the and or but nor of in on at to for from with by as if so than then this that these
    those it its is was are were be"""
_NEVER_A_NAME = frozenset(_NEVER_A_NAME_WORDS.split())
#: a word opens with a letter of any script ("Émile", "Łódź"), never a digit or underscore
#: (a `scripts.pattern`: combining marks belong to their word, "हिन्दी" is one)
_TOKEN = rf"[^\W\d_][\w'’{{marks}}-]*[\w{{marks}}]|[^\W\d_]|[{_ENDS}]|[{re.escape(_BREAKS)}]"
#: Scripts written without spaces between words (Thai, Lao, Myanmar, Khmer, kana, Han): a run of
#: them is a clause, not a word, so it is never a concept. (A `scripts.pattern`, compiled on
#: first use: its large class cost every command's start.)
_UNSPACED = (
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]"
)
_POSSESSIVE = re.compile(r"['’]s$")
#: A contraction's clitic ("You're", "I've", "Dana'll"): the word before it is what may be a
#: name. A negation ("Don't", "Can't") never is one.
_CLITIC = re.compile(r"['’](?:re|ve|ll|d|m)$", re.IGNORECASE)
_NEGATION = re.compile(r"n['’]t$", re.IGNORECASE)
#: Titles written with a full stop ("Dr. Smith"): the stop ends no sentence, and the title is
#: no part of the name a query would spell ("Smith"), nor a concept.
_TITLE_WORDS = "mr mrs ms dr prof rev fr capt gen col lt sgt sen rep gov jr sr"
_TITLES = frozenset(_TITLE_WORDS.split())
#: Abbreviations that open a place's name ("St. Louis", "Mt. Everest"): kept, with their stop.
_PLACE_PREFIXES = frozenset(("st", "mt", "ft"))

#: Common English words: never a concept, and never a name when they open a sentence.
_COMMON_WORDS = """
    a about above after again against ago all almost also although always am among an and
    another any anyone anything anyway are around as ask asked at away back be became because
    become been before being below best better between both but by came can cannot could
    did do does doing done down during each either else even ever every everyone everything
    few for found from get gets getting give given go goes going gone good got great had has
    have having he hello her here hers herself hey hi him himself his how however i if im in
    into is it its itself just keep kind know last later least less let like likely little lot
    lots made make makes making many may maybe me might mine more most much must my myself
    need never new next no nor not nothing now of off oh ok okay on once one only or other
    others our ours out over own pretty quite rather really right said same saw say says see
    seem seems she should since so some someone something sometimes soon still such sure take
    tell than thank thanks that the their theirs them themselves then there these they thing
    things think this those though thought through time times to today together told too took
    totally toward tried try trying under until up upon us use used very want wanted was way
    we well went were what whatever when where whether which while who whole whom whose why
    will wish with without wow would yeah year years yes yesterday yet you your yours yourself
    tomorrow tonight definitely actually absolutely awesome amazing glad happy nice cool
    lately recently especially anything everybody somebody nobody thats dont didnt cant
    isnt wasnt youre ive ill id hes shes theyre weve been going gonna wanna
    monday tuesday wednesday thursday friday saturday sunday january february march april
    june july august september october november december"""
COMMON = frozenset(_COMMON_WORDS.split())
#: Capitalised but never a name: the dates are in the content, where BM25 finds them.
_CALENDAR = frozenset(
    [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
        # their abbreviations, less those that are names or words too ("Jan", "Sun", "Mar")
        "mon",
        "tue",
        "tues",
        "wed",
        "thu",
        "thur",
        "thurs",
        "fri",
        "feb",
        "apr",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    ]
)


def _is_word(word: str) -> bool:
    """Letters (with their combining marks) and inner hyphens, of a script that spaces words."""
    letters = word.replace("-", "")
    if not letters.isalpha() and not all(
        c.isalpha() or unicodedata.category(c).startswith("M") for c in letters
    ):
        return False  # digits, apostrophes ("don't"), symbols
    return word.isascii() or pattern(_UNSPACED).search(word) is None


def _abbreviated(tokens: list[str], i: int) -> bool:
    """Whether tokens[i] is a capitalised title or place prefix written with its full stop."""
    token = tokens[i]
    return (
        token[:1].isupper()
        and i + 1 < len(tokens)
        and tokens[i + 1] == "."
        and (token.casefold() in _TITLES or token.casefold() in _PLACE_PREFIXES)
    )


def extract_keys(
    content: str, max_keys: int | None = None, max_chars: int | None = None
) -> list[KeySpec]:
    """Name and concept keys for `content` (possibly none, for a text of only common words).

    The key limits a caller's keys are held to hold here too: at most `max_keys` keys, and a
    label longer than `max_chars` or MAX_EXTRACTED_CHARS (a long run of capitalised words: a
    title, shouted text) is no name a query would spell, so it is left out rather than cut.
    """
    # NFC, as check.label makes every label
    tokens = pattern(_TOKEN).findall(unicodedata.normalize("NFC", content))
    names: list[str] = []
    in_name: set[str] = set()
    run: list[str] = []
    sentence_start = True

    def close_run() -> None:
        if len(run) == 1 and run[0].casefold() in _NEVER_A_NAME:
            run.clear()
        if run:
            label = _POSSESSIVE.sub("", " ".join(run))
            if label.casefold() not in {n.casefold() for n in names}:
                names.append(label)
            in_name.update(w.casefold() for w in run)
            run.clear()

    for i, token in enumerate(tokens):
        if token in _BREAKS:
            close_run()  # a sentence start stays one: '"Yesterday' opens no name
            continue
        if token in _ENDS:
            if token == "." and i and _abbreviated(tokens, i - 1):
                continue  # "Dr." or "St.": the stop ends nothing
            close_run()
            sentence_start = True
            continue
        if _abbreviated(tokens, i):
            if token.casefold() in _TITLES:
                close_run()  # "Dr. Smith": the name is "Smith"
            else:
                run.append(token + ".")  # "St. Louis"
            sentence_start = False
            continue
        bare = _CLITIC.sub("", _POSSESSIVE.sub("", token))
        capitalised = (
            bare[:1].isupper() and bare.casefold() != "i" and _NEGATION.search(bare) is None
        )
        if (
            capitalised
            and bare.casefold() not in _CALENDAR
            and not (sentence_start and bare.casefold() in COMMON)
        ):
            run.append(bare)
            if bare != token:  # "Mel's" or "Dana'll" ends a name
                close_run()
        else:
            close_run()
        sentence_start = False
    close_run()

    # Counted by the case-folded word, labelled by the first lowercase spelling: casefold
    # rewrites letters ("straße" -> "strasse", a final "ς" -> "σ"), lower keeps them.
    counts: dict[str, int] = {}
    spelt: dict[str, str] = {}
    for token in tokens:
        word = _POSSESSIVE.sub("", token).lower()
        folded = word.casefold()
        if (
            len(word) >= MIN_CONCEPT_CHARS
            and _is_word(word)
            and folded not in COMMON
            and folded not in _CALENDAR  # "Sept" is no more a concept than "September"
            and folded not in in_name
            and folded not in _TITLES
        ):
            counts[folded] = counts.get(folded, 0) + 1
            spelt.setdefault(folded, word)
    concepts = sorted(counts, key=lambda w: (-counts[w], -len(spelt[w])))[:MAX_CONCEPTS]
    specs = [KeySpec(n, "name") for n in names[:MAX_NAMES]]
    seen = {s.label.casefold() for s in specs}
    specs += [KeySpec(spelt[c], "concept") for c in concepts if c not in seen]
    longest = MAX_EXTRACTED_CHARS if max_chars is None else min(max_chars, MAX_EXTRACTED_CHARS)
    specs = [s for s in specs if len(s.label) <= longest]
    return specs if max_keys is None else specs[:max_keys]
