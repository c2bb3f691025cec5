"""The reader's tables: what a TTS front end says for abbreviations, acronyms, symbols, units and the like (no code).

Every rule of the reader (service/text/reader.py, spoken.py, words.py) that names particular words reads them
from here, so a reading is changed by editing a table, not the code. Keys are matched as documented above each
table; expansions are lower-case words the lexicon (or the model) pronounces. docs/TEXT.md lists every table with examples.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Currency:
    """How an amount in one currency is said: `unit`s and, for two decimal places, `cent`s (none: the amount is
    read as a number)."""

    unit: tuple[str, str]  # one, many
    cent: tuple[str, str] | None = None


# symbol before the amount -> how it is said ("$5", "€2.5 million"); a symbol with no amount reads as the plural
CURRENCIES = {
    "$": Currency(("dollar", "dollars"), ("cent", "cents")),
    "£": Currency(("pound", "pounds"), ("penny", "pence")),
    "€": Currency(("euro", "euros"), ("cent", "cents")),
    "¥": Currency(("yen", "yen")),
    "₹": Currency(("rupee", "rupees"), ("paisa", "paise")),
    "₩": Currency(("won", "won")),
}

# a magnitude after a number ("2.5 million", "$3bn", "10k"): the word it is read as. Case-insensitive; the short
# forms only right after a currency amount or a number with no space ("$5m", "10k"), where they cannot be a word.
MAGNITUDES = {"thousand": "thousand", "million": "million", "billion": "billion", "trillion": "trillion"}
SHORT_MAGNITUDES = {"k": "thousand", "m": "million", "mn": "million", "bn": "billion", "b": "billion", "tn": "trillion"}

# a symbol read as words wherever it stands alone (not part of an amount, a unit, a URL...)
SYMBOL_WORDS = {
    "%": ("percent",),
    "&": ("and",),
    "+": ("plus",),
    "@": ("at",),
    "=": ("equals",),
    "°": ("degrees",),
    "©": ("copyright",),
    "®": ("registered",),
    "™": ("trademark",),
    "§": ("section",),
    "¶": ("paragraph",),
    "×": ("times",),
    "÷": ("divided", "by"),
    "±": ("plus", "or", "minus"),
    "<": ("less", "than"),
    ">": ("greater", "than"),
    "≤": ("less", "than", "or", "equal", "to"),
    "≥": ("greater", "than", "or", "equal", "to"),
    "≠": ("not", "equal", "to"),
    "≈": ("approximately",),
    "~": ("about",),
    "²": ("squared",),
    "³": ("cubed",),
    "µ": ("micro",),
    "$": ("dollars",),
    "£": ("pounds",),
    "€": ("euros",),
    "¥": ("yen",),
    "₹": ("rupees",),
    "₩": ("won",),
}
# "#" before a number is "number" ("#1"), before a word "hashtag" ("#tbt"); alone it is skipped
HASH_BEFORE_NUMBER = ("number",)
HASH_BEFORE_WORD = ("hashtag",)

# a unit right after a number ("5kg", "5 kg", "18°C"): (one, many). Case-sensitive (ms is not MS, Mb is not MB).
# ATTACHED_UNITS are read only with no space between ("5m", "10s"): with a space they are too often words ("5 in").
UNITS = {
    "°C": ("degree celsius", "degrees celsius"),
    "°F": ("degree fahrenheit", "degrees fahrenheit"),
    "°": ("degree", "degrees"),
    "%": ("percent", "percent"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "m/s": ("meter per second", "meters per second"),
    "km": ("kilometer", "kilometers"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "mi": ("mile", "miles"),
    "ft": ("foot", "feet"),
    "kg": ("kilogram", "kilograms"),
    "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "ms": ("millisecond", "milliseconds"),
    "sec": ("second", "seconds"),
    "min": ("minute", "minutes"),
    "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"),
    "KB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("giga hertz", "giga hertz"),
    "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
}
ATTACHED_UNITS = {
    "m": ("meter", "meters"),
    "g": ("gram", "grams"),
    "s": ("second", "seconds"),
    "h": ("hour", "hours"),
    "L": ("liter", "liters"),
    "l": ("liter", "liters"),
    "W": ("watt", "watts"),
    "V": ("volt", "volts"),
    "in": ("inch", "inches"),
}

# a fraction's denominator -> (one, many): "1/2" one half, "3/4" three quarters, "5/8" five eighths; others are
# read with num2words' ordinal ("3/7" three sevenths)
FRACTION_NAMES = {2: ("half", "halves"), 4: ("quarter", "quarters")}

# Abbreviations, matched with the case shown or all in capitals, the full stop optional unless `needs_stop`:
# key -> (before a capitalised word, after a capitalised word or a number, anywhere else).
# "Dr. Smith" doctor, "Elm Dr." drive; "St. Louis" saint, "Main St." street.
ABBREVIATIONS = {
    "Dr": ("doctor", "drive", "doctor"),
    "St": ("saint", "street", "street"),
    "Mr": ("mister", "mister", "mister"),
    "Mrs": ("missus", "missus", "missus"),
    "Ms": ("ms", "ms", "ms"),  # CMUdict's "ms" is M IH1 Z, the title
    "Prof": ("professor", "professor", "professor"),
    "Mt": ("mount", "mount", "mount"),
    "Gen": ("general", "general", "general"),
    "Jr": ("junior", "junior", "junior"),
    "Sr": ("senior", "senior", "senior"),
    "Capt": ("captain", "captain", "captain"),
    "Col": ("colonel", "colonel", "colonel"),
    "Lt": ("lieutenant", "lieutenant", "lieutenant"),
    "Sgt": ("sergeant", "sergeant", "sergeant"),
    "Ave": ("avenue", "avenue", "avenue"),
    "Rd": ("road", "road", "road"),
    "Blvd": ("boulevard", "boulevard", "boulevard"),
    "etc": ("etcetera", "etcetera", "etcetera"),
    "vs": ("versus", "versus", "versus"),
    "approx": ("approximately", "approximately", "approximately"),
    "No": ("number", "number", "number"),  # only before a number: "No. 5"
    "Fig": ("figure", "figure", "figure"),
}
# keys whose full stop is needed (without it they are ordinary words: "gen", "col", "no", "fig")
ABBREVIATIONS_NEED_STOP = {"Gen", "Col", "No", "Fig", "Ave", "Capt", "approx"}
ABBREVIATIONS_BEFORE_NUMBER_ONLY = {"No"}  # "No. 5" number five; "No." elsewhere is the word no

# dotted abbreviations, matched case-insensitively with their stops: what they are read as; any other run of
# dotted letters is spelt as one word ("U.S." U S, "a.m." A M)
DOTTED = {
    "e.g.": ("for", "example"),
    "i.e.": ("that", "is"),
    "etc.": ("etcetera",),
    "vs.": ("versus",),
}

# after a time or a number, am and pm (any case, with or without stops) are letters: "10:30 am" ten thirty A M
TIME_SUFFIXES = {"am": "am", "pm": "pm", "a.m.": "am", "p.m.": "pm"}

# how a letter is said when a word is spelt (CMUdict's readings of the single letters, "a" as the letter)
LETTERS = {
    "a": "EY1",
    "b": "B IY1",
    "c": "S IY1",
    "d": "D IY1",
    "e": "IY1",
    "f": "EH1 F",
    "g": "JH IY1",
    "h": "EY1 CH",
    "i": "AY1",
    "j": "JH EY1",
    "k": "K EY1",
    "l": "EH1 L",
    "m": "EH1 M",
    "n": "EH1 N",
    "o": "OW1",
    "p": "P IY1",
    "q": "K Y UW1",
    "r": "AA1 R",
    "s": "EH1 S",
    "t": "T IY1",
    "u": "Y UW1",
    "v": "V IY1",
    "w": "D AH1 B AH0 L Y UW0",
    "x": "EH1 K S",
    "y": "W AY1",
    "z": "Z IY1",
}

# Acronyms. An all-capital word of 2 to 5 letters that the dictionary does not know is spelt ("GPU");
# one it knows is read from it (NASA, NATO, and CMUdict's own spelt entries: FBI, CPU).
# SPELLED_ACRONYMS: all-capital words that are also common lower-case words, spelt unless the whole sentence
# is in capitals ("the US", "IT support", "the WHO", "10 AM"; "WHO ARE US" reads as words).
SPELLED_ACRONYMS = {"US", "IT", "WHO", "AM", "PM", "AI", "ID", "AD", "UN", "LED", "ER", "PR", "HR", "IQ"}
# all-capital words of up to 5 letters read as words though the dictionary does not know them
WORD_ACRONYMS = {"COVID", "GIF", "JPEG", "FAQ", "WIFI", "SARS", "MERS", "DARPA"}
# an all-capital word with letters spelt this long or shorter (longer unknown ones are read as words by the model)
MAX_SPELLED_LETTERS = 5

# Roman numerals. After these words (in any case) a numeral is a cardinal: "World War II" two, "Chapter IV" four.
ROMAN_CARDINAL_AFTER = {
    "war",
    "chapter",
    "part",
    "volume",
    "vol",
    "book",
    "act",
    "scene",
    "section",
    "article",
    "appendix",
    "phase",
    "stage",
    "level",
    "type",
    "class",
    "grade",
    "title",
    "bowl",
    "apollo",
    "vatican",
}
# after these given names a numeral is a regnal ordinal: "Henry VIII" Henry the eighth, "Elizabeth I" the first.
# After any other capitalised word a numeral of two or more letters (I, V and X only) is a cardinal ("Rocky II");
# "I" alone is a numeral only after the words of these two tables ("Then I went" keeps the pronoun).
ROMAN_REGNAL_NAMES = {
    "alexander",
    "alfonso",
    "benedict",
    "catherine",
    "charles",
    "constantine",
    "edward",
    "elizabeth",
    "ferdinand",
    "francis",
    "frederick",
    "george",
    "gregory",
    "henry",
    "innocent",
    "james",
    "john",
    "leo",
    "louis",
    "ludwig",
    "mary",
    "napoleon",
    "nicholas",
    "paul",
    "peter",
    "philip",
    "pius",
    "ramses",
    "richard",
    "robert",
    "william",
}

# Words whose accents tell them from another word the accents fold into: the accented spelling (lower-case)
# -> its pronunciation (CMUdict's entry for that sense). Other accented words are read with their accents
# folded ("café" cafe, "naïve" naive), which the dictionary knows.
ACCENTED_WORDS = {
    "résumé": "R EH1 Z AH0 M EY2",
    "resumé": "R EH1 Z AH0 M EY2",
    "exposé": "EH2 K S P OW0 Z EY1",
    "rosé": "R OW0 Z EY1",
    "pâté": "P AA0 T EY1",
    "paté": "P AA0 T EY1",
    "lamé": "L AA0 M EY1",
    "maté": "M AA1 T EY0",
    "saké": "S AA1 K IY0",
    "née": "N EY1",
    "cliché": "K L IY0 SH EY1",
}

# URLs and e-mail addresses: how their punctuation is read ("example.com/a" example dot com slash a)
URL_SYMBOLS = {
    ".": ("dot",),
    "/": ("slash",),
    ":": ("colon",),
    "@": ("at",),
    "-": ("dash",),
    "_": ("underscore",),
    "?": ("question", "mark"),
    "=": ("equals",),
    "&": ("and",),
    "#": ("hash",),
    "%": ("percent",),
    "+": ("plus",),
    "~": ("tilde",),
}
# parts of a URL that are spelt: "https" H T T P S, "www" W W W
URL_SPELLED = {"http", "https", "ftp", "www"}

# with `punctuation: true`, the marks kept between words as their own tokens (where a TTS engine pauses): sentence
# ends, phrase breaks, brackets and dashes ("-" only spaced, or written as a dash: "—")
PAUSE_MARKS = {".", ",", ";", ":", "!", "?", "(", ")", "-"}

# how a digit is said when a number is read digit by digit (phone numbers)
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# "1990-1995", "2-3 cups": a hyphen between two numbers is read as "to"
RANGE_WORD = ("to",)
# "v2.0" version two point zero: a "v" before a dotted number
VERSION_WORD = ("version",)
