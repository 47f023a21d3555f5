"""Deterministic synthetic German->English parallel corpus for the demo run.

The corpus is produced by a small hand-written grammar with real German
morphology (gender, case, strong/weak/mixed adjective declension, weak
nouns, separable verbs, verb-second and verb-final word order, perfect
tense with the right auxiliary, modal verbs, negation with ``nicht`` /
``kein``) and a single, deterministic English rendering of every German
sentence.  The files are laid out exactly like the IWSLT 2016 de-en
release, so the normal preprocessing code can read them unchanged::

    train.tags.de-en.de / .en                   (training text + <tag> lines)
    IWSLT16.TED.tst2013.de-en.de.xml / .en.xml  (dev set, mteval XML)
    IWSLT16.TED.tst2014.de-en.de.xml / .en.xml  (test set, mteval XML)

Usage::

    python demo_corpus.py --data_dir data/demo --seed 0

Public API: :func:`generate_pairs`, :func:`write_demo_corpus`, :func:`main`;
lower-level helpers used by the tests: :func:`noun_phrase`,
:func:`place_phrase`, :func:`simple_sentence`.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import tempfile
from dataclasses import dataclass, replace
from xml.sax.saxutils import escape

__all__ = [
    "generate_pairs",
    "write_demo_corpus",
    "noun_phrase",
    "place_phrase",
    "simple_sentence",
    "main",
]

# ===================================================================== nouns
# German singular, gender (m/f/n; "mw" = weak masculine: -(e)n in acc/dat sg),
# German plural ("-" = mass noun, "~" = countable but no plural used),
# English singular, English plural ("." = regular), tags (an indented line
# continues the tags of the row above).  "_" stands for a space in English.
_NOUN_TABLE = """
Mann         m   Männer         man            men        person male adult noposs
Frau         f   Frauen         woman          women      person female adult noposs
Kind         n   Kinder         child          children   person child noisy
Junge        mw  Jungen         boy            .          person male child noposs
Mädchen      n   Mädchen        girl           .          person female child noposs
Baby         n   Babys          baby           .          baby hold carry noisy
Lehrer       m   Lehrer         teacher        .          person male adult job
Lehrerin     f   Lehrerinnen    teacher        .          person female adult job
Arzt         m   Ärzte          doctor         .          person male adult job
Ärztin       f   Ärztinnen      doctor         .          person female adult job
Student      mw  Studenten      student        .          person male adult student noposs
Studentin    f   Studentinnen   student        .          person female adult student noposs
Koch         m   Köche          cook           .          person male adult job noposs
Köchin       f   Köchinnen      cook           .          person female adult job noposs
Polizist     mw  Polizisten     police_officer .          person male adult job noposs
Polizistin   f   Polizistinnen  police_officer .          person female adult job noposs
Nachbar      mw  Nachbarn       neighbor       .          person male adult
Nachbarin    f   Nachbarinnen   neighbor       .          person female adult
Freund       m   Freunde        friend         .          person male friend
Freundin     f   Freundinnen    friend         .          person female friend
Bruder       m   Brüder         brother        .          person male kin
Schwester    f   Schwestern     sister         .          person female kin
Mutter       f   Mütter         mother         .          person female adult kin solo
Vater        m   Väter          father         .          person male adult kin solo
Großmutter   f   Großmütter     grandmother    .          person female adult kin solo
Großvater    m   Großväter      grandfather    .          person male adult kin solo
Sohn         m   Söhne          son            .          person male kin
Tochter      f   Töchter        daughter       .          person female kin
Onkel        m   Onkel          uncle          .          person male adult kin
Tante        f   Tanten         aunt           .          person female adult kin
Künstler     m   Künstler       artist         .          person male adult job noposs
Künstlerin   f   Künstlerinnen  artist         .          person female adult job noposs
Sänger       m   Sänger         singer         .          person male adult job noposs
Sängerin     f   Sängerinnen    singer         .          person female adult job noposs
Kellner      m   Kellner        waiter         .          person male adult job noposs
Kellnerin    f   Kellnerinnen   waitress       .          person female adult job noposs
Bäcker       m   Bäcker         baker          .          person male adult job noposs
Fahrer       m   Fahrer         driver         .          person male adult job noposs
Tourist      mw  Touristen      tourist        .          person male adult noposs
Touristin    f   Touristinnen   tourist        .          person female adult noposs
Soldat       mw  Soldaten       soldier        .          person male adult noposs
Schüler      m   Schüler        pupil          .          person male child
Schülerin    f   Schülerinnen   pupil          .          person female child
Chef         m   Chefs          boss           .          person male adult job
Chefin       f   Chefinnen      boss           .          person female adult job
Hund         m   Hunde          dog            .          animal pet dog fur predator swimmer have
                                                          lieanimal noisy jumper
Katze        f   Katzen         cat            .          animal pet fur predator prey climber have
                                                          lieanimal hold jumper
Pferd        n   Pferde         horse          .          animal farm fur
Vogel        m   Vögel          bird           .          animal bird prey noisy noposs
Kuh          f   Kühe           cow            .          animal farm fur
Maus         f   Mäuse          mouse          mice       animal prey fur catch noposs
Fisch        m   Fische         fish           fish       animal swimmer prey catch noposs
Bär          mw  Bären          bear           .          animal wild fur predator climber noposs
Affe         mw  Affen          monkey         .          animal wild climber noposs
Löwe         mw  Löwen          lion           .          animal wild predator noposs
Schaf        n   Schafe         sheep          sheep      animal farm fur
Ente         f   Enten          duck           .          animal bird prey swimmer noposs
Elefant      mw  Elefanten      elephant       .          animal wild noposs
Kaninchen    n   Kaninchen      rabbit         .          animal pet fur prey have hold lieanimal
                                                          jumper
Fuchs        m   Füchse         fox            .          animal wild fur predator noposs
Schwein      n   Schweine       pig            .          animal farm
Papagei      m   Papageien      parrot         .          animal bird pet have
Hase         mw  Hasen          hare           .          animal wild fur prey noposs
Buch         n   Bücher         book           .          thing read write media story thick lie
                                                          hold have show carry
Ball         m   Bälle          ball           .          thing toy throw catch color lose lie hold
                                                          have
Brief        m   Briefe         letter         .          thing read write send open important long
                                                          lie wait4
Schlüssel    m   Schlüssel      key            .          thing lose important lie have
Tasche       f   Taschen        bag            .          thing container open close carry color
                                                          lose lie hold have heavy
Stuhl        m   Stühle         chair          .          furniture surface build repair carry
                                                          color comfy jumpon
Tisch        m   Tische         table          .          furniture surface build repair color
                                                          heavy jumpon
Sofa         n   Sofas          sofa           .          furniture surface color comfy jumpon
Bett         n   Betten         bed            .          furniture surface comfy jumpon
Bank         f   Bänke          bench          .          furniture surface
Regal        n   Regale         shelf          shelves    furniture surface build
Schrank      m   Schränke       cupboard       .          furniture surface container wardrobe open
                                                          close
Lampe        f   Lampen         lamp           .          thing repair color stand lamp
Uhr          f   Uhren          clock          .          thing repair hang
Bild         n   Bilder         picture        .          thing paint show hang lie media
Zeitung      f   Zeitungen      newspaper      .          thing read lie
Telefon      n   Telefone       phone          .          thing repair modern lie lose have
Computer     m   Computer       computer       .          thing repair modern stand have
Blume        f   Blumen         flower         .          thing color fresh paint hold
Hut          m   Hüte           hat            .          thing wear color lose hang
Mantel       m   Mäntel         coat           .          thing wear color hang
Jacke        f   Jacken         jacket         .          thing wear color hang lose
Schuh        m   Schuhe         shoe           .          thing wear color comfy
Kleid        n   Kleider        dress          .          thing wear color hang wash
Geschenk     n   Geschenke      gift           .          thing open send lie gift
Flasche      f   Flaschen       bottle         .          thing container open close stand hold
Tasse        f   Tassen         cup            .          thing dish stand hold color wash
Teller       m   Teller         plate          .          thing dish stand wash
Glas         n   Gläser         glass          .          thing dish stand hold wash
Kiste        f   Kisten         box            .          thing container open close carry heavy
                                                          stand
Stift        m   Stifte         pen            .          thing lose lie hold
Heft         n   Hefte          notebook       .          thing lie lose thick
Foto         n   Fotos          photo          .          thing show send hang lie
Koffer       m   Koffer         suitcase       .          thing container open close carry heavy
                                                          stand
Regenschirm  m   Regenschirme   umbrella       .          thing lose hold have
Paket        n   Pakete         package        .          thing send open heavy lie wait4
Stein        m   Steine         stone          .          throw heavy
Knochen      m   Knochen        bone           .          toy afood
Rechnung     f   Rechnungen     bill           .          pay lie noposs
Fahrkarte    f   Fahrkarten     ticket         .          thing lose have
Lied         n   Lieder         song           .          media write song noposs
Gedicht      n   Gedichte       poem           .          media read write long
Geschichte   f   Geschichten    story          stories    media read write tell story long
Witz         m   Witze          joke           .          joke tell noposs
Film         m   Filme          movie          .          media film story long noposs
E-Mail       f   E-Mails        email          .          read write send important long wait4
Wand         f   Wände          wall           .          wall
Fenster      n   Fenster        window         .          open close cleanroom
Tür          f   Türen          door           .          open close repair door
Baum         m   Bäume          tree           .          paint climb
Turm         m   Türme          tower          .          build landmark noposs
Schneemann   m   Schneemänner   snowman        snowmen    build noposs
Boot         n   Boote          boat           .          vehicle own build color
Fahrrad      n   Fahrräder      bicycle        .          vehicle own transport repair color wash
                                                          have
Auto         n   Autos          car            .          vehicle own transport repair color wash
                                                          have modern
Zug          m   Züge           train          .          vehicle transport wait4 noposs depart
Bus          m   Busse          bus            .          vehicle transport wait4 noposs depart
Schiff       n   Schiffe        ship           .          vehicle transport noposs depart
Flugzeug     n   Flugzeuge      plane          .          vehicle transport noposs depart
Urlaub       m   ~              vacation       .          event noposs
Apfel        m   Äpfel          apple          .          food fruit red green fresh sweet afood
Banane       f   Bananen        banana         .          food fruit yellow afood
Birne        f   Birnen         pear           .          food fruit green yellow sweet
Orange       f   Orangen        orange         .          food fruit sweet fresh
Zitrone      f   Zitronen       lemon          .          food fruit yellow fresh
Tomate       f   Tomaten        tomato         tomatoes   food veg red green fresh
Kartoffel    f   Kartoffeln     potato         potatoes   food veg cook
Karotte      f   Karotten       carrot         .          food veg fresh afood
Ei           n   Eier           egg            .          food cook fresh
Kuchen       m   Kuchen         cake           .          food sweet bake
Keks         m   Kekse          cookie         .          food sweet bake
Eis          n   ~              ice_cream      .          food sweet
Wurst        f   Würste         sausage        .          food
Pizza        f   Pizzen         pizza          .          food bake hot
Brot         n   -              bread          .          food fresh bake
Käse         m   -              cheese         .          food afood
Suppe        f   -              soup           .          food cook hot
Reis         m   -              rice           .          food cook
Kaffee       m   -              coffee         .          drink hot brew
Tee          m   -              tea            .          drink hot brew
Wasser       n   -              water          .          drink
Milch        f   -              milk           .          drink hot fresh
Saft         m   -              juice          .          drink fresh
Musik        f   -              music          .          music
Fußball      m   -              soccer         .          game bare
Schach       n   -              chess          .          game bare
Tennis       n   -              tennis         .          game bare
Deutsch      n   -              German         .          lang bare
Englisch     n   -              English        .          lang bare
Französisch  n   -              French         .          lang bare
Spanisch     n   -              Spanish        .          lang bare
Italienisch  n   -              Italian        .          lang bare
Park         m   Parks          park           .          place outdoor old new through meet noposs
Garten       m   Gärten         garden         .          place outdoor old have through
Küche        f   Küchen         kitchen        .          place room cleanroom tidy cozy
Haus         n   Häuser         house          .          place building have own paint build front
Wohnung      f   Wohnungen      apartment      .          place building have own tidy cleanroom
                                                          cozy busy
Zimmer       n   Zimmer         room           .          place room cleanroom tidy cozy
Stadt        f   Städte         city           cities     place old visit show through noposs busy
Wald         m   Wälder         forest         .          place outdoor old dark through flyover
                                                          wood noposs
Büro         n   Büros          office         .          place room tidy cleanroom
Restaurant   n   Restaurants    restaurant     .          place building landmark cozy seek meet
                                                          noposs busy
Café         n   Cafés          café           .          place building cozy seek meet noposs busy
Bahnhof      m   Bahnhöfe       station        .          place building front seek pickup meet
                                                          noposs busy
Flughafen    m   Flughäfen      airport        .          place building pickup noposs busy
Bibliothek   f   Bibliotheken   library        libraries  place building landmark noposs
Kino         n   Kinos          cinema         .          place building noposs
Supermarkt   m   Supermärkte    supermarket    .          place building seek noposs
Markt        m   Märkte         market         .          place outdoor noposs busy
Bäckerei     f   Bäckereien     bakery         bakeries   place building seek noposs
Krankenhaus  n   Krankenhäuser  hospital       .          place building noposs
Museum       n   Museen         museum         .          place building landmark visit noposs
Zoo          m   Zoos           zoo            .          place visit noposs
Hotel        n   Hotels         hotel          .          place building landmark cozy seek front
                                                          noposs
Schule       f   Schulen        school         .          place building front pickup schoolish
                                                          noposs busy
Strand       m   Strände        beach          .          place outdoor noposs
See          m   Seen           lake           .          place outdoor flyover swimplace noposs
Fluss        m   Flüsse         river          .          place outdoor flyover swimplace noposs
Meer         n   Meere          sea            .          place outdoor flyover swimplace noposs
Berg         m   Berge          mountain       .          place outdoor climb noposs
Insel        f   Inseln         island         .          place outdoor visit noposs
Dorf         n   Dörfer         village        .          place old visit through noposs
Bauernhof    m   Bauernhöfe     farm           .          place visit
Spielplatz   m   Spielplätze    playground     .          place outdoor new noposs busy
Schwimmbad   n   Schwimmbäder   swimming_pool  .          place building new swimplace noposs
Straße       f   Straßen        street         .          place outdoor noposs busy
"""

# ================================================================ adjectives
# German, English ("big,tall@person": "tall" for nouns tagged person),
# tags of the nouns it may modify; flags: "stem=X" attributive stem,
# "ng" not gradable (no "sehr").
_ADJ_TABLE = """
groß        big,tall@person   person animal thing furniture vehicle place fruit
klein       small             person animal thing furniture vehicle place fruit
alt         old               adult animal thing furniture vehicle building old
jung        young             adult animal
neu         new               thing furniture vehicle building new
schön       beautiful,handsome@male  person place thing furniture vehicle media
hässlich    ugly              animal thing furniture building
rot         red               color red ng
blau        blue              color ng
grün        green             color green ng
gelb        yellow            color yellow ng
schwarz     black             color fur brew ng
weiß        white             color fur ng
braun       brown             color fur ng
grau        gray              color fur ng
bunt        colorful          color ng
teuer       expensive         thing vehicle building furniture stem=teur
billig      cheap             thing vehicle furniture
schwer      heavy             heavy
schnell     fast              vehicle animal
langsam     slow              vehicle animal
müde        tired             person animal
glücklich   happy             person animal
traurig     sad               person animal
hungrig     hungry            person animal baby
durstig     thirsty           person animal
krank       sick              person animal baby
freundlich  friendly          person pet farm
nett        nice              person
klug        clever            person animal
lustig      funny             person media joke
stark       strong            person animal brew
berühmt     famous            job landmark
reich       rich              adult
arm         poor              adult
faul        lazy              person pet
fleißig     hard-working      person
neugierig   curious           person animal
ruhig       quiet             person place
laut        loud,noisy@place  person busy music
interessant interesting       media landmark
langweilig  boring            media
spannend    exciting          story
gut         good              media job
schlecht    bad               media
wichtig     important         important
frisch      fresh             fresh
süß         sweet             sweet
reif        ripe              fruit
lecker      delicious         food
warm        warm              hot wear room
kalt        cold              hot drink room
heiß        hot               hot
sauber      clean             cleanroom wash
schmutzig   dirty             cleanroom wash pet child
leer        empty             container dish room ng
voll        full              container dish ng
lang        long              long
kurz        short             long
dick        thick,fat@animal  thick pet farm
dünn        thin              thick pet
wild        wild              wild
gefährlich  dangerous         predator wild
hell        bright            room lamp
dunkel      dark              room dark stem=dunkl
modern      modern            modern
bequem      comfortable       comfy
gemütlich   cozy              cozy
"""

# ==================================================================== places
# Noun: locative "prep:english", directional "prep:english" ("-" = none),
# activity tags used by the verbs' locative/directional specs.
_PLACE_TABLE = """
Park         in:in     in:to     play walk sit read wait dance go run sing bark exist_out meet
Garten       in:in     in:into   play walk sit read work eat dance sing sleep stay go run come
                                 bark exist_out
Küche        in:in     in:into   eat cook sit work dance sing read go run come exist_in
Haus         in:in     in:into   play stay go run come exist_in
Wohnung      in:in     in:into   stay go come exist_in
Zimmer       in:in     in:into   play read sleep sit study go run come exist_in
Stadt        in:in     in:to     walk shop go
Wald         in:in     in:into   walk go run exist_out
Büro         in:at     in:to     work go
Restaurant   in:at     in:to     eat work go sit dance meet
Café         in:at     in:to     eat sit read wait work go study meet
Bahnhof      an:at     zu:to     wait arrive go work meet
Flughafen    an:at     zu:to     wait arrive go work
Bibliothek   in:at     in:to     read study work go
Kino         in:at     in:to     go
Supermarkt   in:at     in:to     shop work go
Markt        auf:at    auf:to    shop work go
Bäckerei     in:at     zu:to     shop work go
Krankenhaus  in:at     in:to     work go
Museum       in:at     in:to     work go
Zoo          in:at     in:to     go work
Hotel        in:at     in:to     stay arrive work wait sleep go
Schule       in:at     in:to     study go
Strand       an:on     an:to     play walk sit go run
See          an:by     an:to     walk sit go
Fluss        an:by     an:to     walk sit
Meer         an:by     an:to     walk go
Berg         auf:on    auf:up    go
Insel        auf:on    auf:to    stay go
Dorf         in:in     in:to     stay go
Bauernhof    auf:on    auf:to    work go play
Spielplatz   auf:at    auf:to    play go run
Schwimmbad   in:at     in:to     go
Straße       auf:on    -         play wait bark
Sofa         auf:on    -         sit sleep read rest
Bank         auf:on    -         sit sleep read rest
Stuhl        auf:on    -         sit
Bett         auf:on    -         sit
Tisch        an:at     -         sit eat
"""

_NAMES = [  # (name, sex)
    ("Anna", "f"), ("Maria", "f"), ("Lena", "f"), ("Julia", "f"), ("Sophie", "f"),
    ("Emma", "f"), ("Laura", "f"), ("Mia", "f"), ("Sarah", "f"), ("Lisa", "f"),
    ("Thomas", "m"), ("Peter", "m"), ("Lukas", "m"), ("Paul", "m"), ("Max", "m"),
    ("Felix", "m"), ("Jonas", "m"), ("Ben", "m"), ("David", "m"), ("Stefan", "m"),
]
_CITIES = [
    ("Berlin", "Berlin"), ("Hamburg", "Hamburg"), ("München", "Munich"),
    ("Köln", "Cologne"), ("Wien", "Vienna"), ("Paris", "Paris"),
    ("London", "London"), ("Rom", "Rome"), ("Zürich", "Zurich"),
    ("Prag", "Prague"), ("Madrid", "Madrid"), ("Venedig", "Venice"),
    ("Lissabon", "Lisbon"), ("Athen", "Athens"), ("Warschau", "Warsaw"),
]
_NUMBERS = [
    ("zwei", "two"), ("drei", "three"), ("vier", "four"), ("fünf", "five"),
    ("sechs", "six"), ("sieben", "seven"), ("acht", "eight"), ("neun", "nine"),
    ("zehn", "ten"), ("elf", "eleven"), ("zwölf", "twelve"), ("zwanzig", "twenty"),
]
_NUMBER_WEIGHTS = [8, 6, 4, 3, 2, 1, 1, 1, 1, 1, 1, 1]
_CLOCK = [("ein", "one")] + _NUMBERS[:11]
_DAYS = [
    ("Montag", "Monday"), ("Dienstag", "Tuesday"), ("Mittwoch", "Wednesday"),
    ("Donnerstag", "Thursday"), ("Freitag", "Friday"), ("Samstag", "Saturday"),
    ("Sonntag", "Sunday"),
]
_ALL_TENSES = "pres past fut mpres mpast"
# (German, English, tenses it combines with)
_TIMES = [
    ("heute", "today", _ALL_TENSES),
    ("gestern", "yesterday", "past mpast"),
    ("morgen", "tomorrow", "fut mpres"),
    ("jetzt", "now", "pres mpres"),
    ("bald", "soon", "fut"),
    ("am Morgen", "in the morning", _ALL_TENSES),
    ("am Nachmittag", "in the afternoon", _ALL_TENSES),
    ("am Abend", "in the evening", _ALL_TENSES),
    ("in der Nacht", "at night", "pres past"),
    ("am Wochenende", "on the weekend", _ALL_TENSES),
    ("jeden Tag", "every day", "pres past mpres mpast"),
    ("jeden Morgen", "every morning", "pres past mpres mpast"),
    ("letzte Woche", "last week", "past mpast"),
    ("letztes Jahr", "last year", "past mpast"),
    ("vor zwei Tagen", "two days ago", "past mpast"),
    ("vor drei Wochen", "three weeks ago", "past mpast"),
    ("nächste Woche", "next week", "fut mpres"),
    ("nächstes Jahr", "next year", "fut mpres"),
    ("heute Abend", "tonight", "fut mpres"),
    ("im Sommer", "in the summer", "pres past fut"),
    ("im Winter", "in the winter", "pres past fut"),
] + [("am " + d, "on " + e, _ALL_TENSES) for d, e in _DAYS] + [
    (f"um {d} Uhr", f"at {e} o'clock", _ALL_TENSES) for d, e in _CLOCK
]
# frequency adverbs (middle field in German, before the verb in English)
_FREQ = [("oft", "often"), ("immer", "always"), ("manchmal", "sometimes"),
         ("selten", "rarely"), ("nie", "never")]
_INTENS = [("sehr", "very"), ("sehr", "very"), ("ziemlich", "rather")]

# verbs that combine naturally with "gern" (English "like to ...")
_GERN_OK = set("""spielen tanzen singen lachen schwimmen essen_i lesen_i kochen_i einkaufen
spazierengehen fernsehen sitzen lesen schreiben essen trinken kochen backen malen zeichnen
spielen_g sprechen_m gehen laufen fahren fliegen klettern springen lernen_l besuchen hören
fotografieren bauen""".split())

# adjectives that can take "zu" (too), and those describing a passing state
# (only these combine with time / frequency adverbs in copula sentences)
_ZU_OK = set("heiß kalt warm teuer groß klein schwer laut langsam lang kurz alt jung "
             "dunkel hell süß".split())
_STATE_ADJ = set("müde glücklich traurig hungrig durstig krank ruhig laut sauber "
                 "schmutzig leer voll warm kalt heiß".split())
_PERSON_PRED = "müde glücklich traurig hungrig durstig krank".split()

# verbs that do not take modal verbs (not done on purpose)
_NO_MODAL = set("verlieren vergessen bekommen einschlafen aufwachen ankommen_v brauchen "
                "gehören".split())
# stative verbs: no future, time or frequency adverbs
_STATIVE = set("lieben mögen kennen verstehen vermissen haben haben_p gehören".split())

_MODALS = {
    # German present (1sg=3sg, pl), past (sg, pl); English by tense/negation
    "kann": (("kann", "können"), ("konnte", "konnten")),
    "muss": (("muss", "müssen"), ("musste", "mussten")),
    "will": (("will", "wollen"), ("wollte", "wollten")),
    "möchte": (("möchte", "möchten"), None),
}


# ============================================================ lexicon types
@dataclass(frozen=True)
class Noun:
    de: str
    gender: str          # m, f, n
    weak: bool           # n-declension (den Jungen, dem Jungen)
    pl: str | None       # German plural, None if not used
    mass: bool
    en: str
    en_pl: str
    tags: frozenset

    def de_form(self, case: str, plural: bool) -> str:
        if plural:
            if case == "dat" and not self.pl.endswith(("n", "s")):
                return self.pl + "n"
            return self.pl
        if self.weak and case != "nom":
            return self.pl
        return self.de


@dataclass(frozen=True)
class Adj:
    de: str
    stem: str
    en: str
    over: tuple          # ((tag, english), ...)
    tags: frozenset
    gradable: bool

    def en_for(self, noun: Noun | None) -> str:
        if noun is not None:
            for tag, word in self.over:
                if tag in noun.tags:
                    return word
        return self.en


@dataclass(frozen=True)
class Place:
    loc: tuple | None    # (German prep, English prep)
    dir: tuple | None
    acts: frozenset


def _en_plural(word: str) -> str:
    last = word.split()[-1]
    if last.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    if len(last) > 1 and last[-1] == "y" and last[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _en_third(word: str) -> str:
    """English 3rd person singular of a (possibly multi-word) verb."""
    head, _, rest = word.partition(" ")
    if head == "have":
        form = "has"
    elif head.endswith(("s", "x", "ch", "sh", "z", "o")):
        form = head + "es"
    elif len(head) > 1 and head[-1] == "y" and head[-2] not in "aeiou":
        form = head[:-1] + "ies"
    else:
        form = head + "s"
    return form + (" " + rest if rest else "")


def _rows(table: str):
    rows = []
    for line in table.strip("\n").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] == " ":          # continuation of the previous row
            rows[-1] += line.split()
        else:
            rows.append(line.split())
    return rows


def _parse_nouns() -> dict:
    out = {}
    for de, g, pl, en, en_pl, *tags in _rows(_NOUN_TABLE):
        en = en.replace("_", " ")
        mass = pl == "-"
        plural = None if pl in ("-", "~") else pl
        if en_pl == ".":
            en_pl = _en_plural(en)
        out[de] = Noun(de, g[0], g == "mw", plural, mass, en, en_pl.replace("_", " "),
                       frozenset(tags) | ({"mass"} if mass else set()))
    return out


def _parse_adjs() -> dict:
    out = {}
    for de, en, *rest in _rows(_ADJ_TABLE):
        stem = de[:-1] if de.endswith("e") else de
        gradable = True
        tags = []
        for tok in rest:
            if tok.startswith("stem="):
                stem = tok[5:]
            elif tok == "ng":
                gradable = False
            else:
                tags.append(tok)
        base, *over = en.split(",")
        over = tuple(tuple(o.split("@")[::-1]) for o in over)
        out[de] = Adj(de, stem, base, over, frozenset(tags), gradable)
    return out


def _parse_places() -> dict:
    out = {}
    for de, loc, dirn, *acts in _rows(_PLACE_TABLE):
        out[de] = Place(tuple(loc.split(":")),
                        None if dirn == "-" else tuple(dirn.split(":")),
                        frozenset(acts))
    return out


NOUNS = _parse_nouns()
ADJS = _parse_adjs()
PLACES = _parse_places()
_NOUN_LIST = list(NOUNS.values())
_ADJ_LIST = list(ADJS.values())


@functools.lru_cache(maxsize=None)
def _nouns_with(tags: str) -> tuple:
    want = set(tags.split())
    return tuple(n for n in _NOUN_LIST if n.tags & want)


@functools.lru_cache(maxsize=None)
def _adjs_for(noun: Noun) -> tuple:
    return tuple(a for a in _ADJ_LIST if a.tags & noun.tags)


@functools.lru_cache(maxsize=None)
def _places_with(act: str) -> tuple:
    return tuple(NOUNS[k] for k, p in PLACES.items() if act in p.acts)


# ============================================================= declension
_DEF = {
    "nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"},
}
# endings of dies-/strong adjectives, of ein-words, and adjective endings
_STRONG = {
    "nom": {"m": "er", "f": "e", "n": "es", "pl": "e"},
    "acc": {"m": "en", "f": "e", "n": "es", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
_EIN = {
    "nom": {"m": "", "f": "e", "n": "", "pl": "e"},
    "acc": {"m": "en", "f": "e", "n": "", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
_WEAK_ADJ = {
    "nom": {"m": "e", "f": "e", "n": "e", "pl": "en"},
    "acc": {"m": "en", "f": "e", "n": "e", "pl": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"},
}
_MIXED_ADJ = {
    "nom": {"m": "er", "f": "e", "n": "es", "pl": "en"},
    "acc": {"m": "en", "f": "e", "n": "es", "pl": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"},
}
_POSS = {"mein": "my", "dein": "your", "unser": "our"}
_EIN_WORDS = {"indef": "ein", "kein": "kein", "mein": "mein", "dein": "dein", "unser": "unser"}
_DEF_LIKE = {"def", "dies", "mein", "dein", "unser"}

_PRONOUNS = {  # key: (German nominative, English, agreement)
    "ich": ("ich", "I", "1sg"),
    "wir": ("wir", "we", "pl"),
    "er": ("er", "he", "3sg"),
    "sie": ("sie", "she", "3sg"),
    "es": ("es", "it", "3sg"),
    "sie_pl": ("sie", "they", "pl"),
}

_CONTRACT = {("in", "dem"): "im", ("an", "dem"): "am", ("zu", "dem"): "zum",
             ("zu", "der"): "zur", ("in", "das"): "ins", ("an", "das"): "ans",
             ("von", "dem"): "vom", ("bei", "dem"): "beim"}
_DAT_PREPS = {"mit", "zu", "von", "aus", "bei", "nach", "seit"}


def _a_an(word: str) -> str:
    w = word.lower()
    if w.startswith(("one", "uni", "use", "eu")):
        return "a"
    if w.startswith(("hour", "honest")):
        return "an"
    return "an" if w[:1] in "aeiou" else "a"


@dataclass
class NP:
    """A noun phrase; renders itself in German (any case) and English."""
    noun: Noun | None = None
    det: str = "def"     # def indef kein zero dies mein dein unser viele einige num
    plural: bool = False
    adj: Adj | None = None
    intens: tuple | None = None        # ("sehr", "very")
    count: tuple | None = None         # ("zwei", "two") when det == "num"
    fixed: tuple | None = None         # (German, English, agreement, sex) names/pronouns
    pron_key: str | None = None

    @property
    def agr(self) -> str:
        if self.fixed:
            return self.fixed[2]
        return "pl" if self.plural else "3sg"

    @property
    def definite(self) -> bool:
        return self.fixed is not None or self.det in _DEF_LIKE

    @property
    def gkey(self) -> str:
        return "pl" if self.plural else self.noun.gender

    def de(self, case: str) -> str:
        if self.fixed:
            return self.fixed[0]
        g = self.gkey
        det = self.det
        if det == "def":
            art, table = _DEF[case][g], _WEAK_ADJ
        elif det == "dies":
            art, table = "dies" + _STRONG[case][g], _WEAK_ADJ
        elif det in _EIN_WORDS:
            art, table = _EIN_WORDS[det] + _EIN[case][g], _MIXED_ADJ
        elif det in ("viele", "einige"):
            art, table = det[:-1] + _STRONG[case][g], _STRONG
        elif det == "num":
            art, table = self.count[0], _STRONG
        else:  # zero article
            art, table = "", _STRONG
        words = [art]
        if self.adj is not None:
            if self.intens:
                words.append(self.intens[0])
            words.append(self.adj.stem + table[case][g])
        words.append(self.noun.de_form(case, self.plural))
        return " ".join(w for w in words if w)

    def article_de(self, case: str) -> str:
        """The bare definite article (for contraction checks)."""
        return _DEF[case][self.gkey] if self.det == "def" and not self.fixed else ""

    def en(self, kein: str = "a", bare: bool = False) -> str:
        if self.fixed:
            return self.fixed[1]
        noun = self.noun
        body = []
        if self.adj is not None:
            if self.intens:
                body.append(self.intens[1])
            body.append(self.adj.en_for(noun))
        body.append(noun.en_pl if self.plural else noun.en)
        det = self.det
        if det == "def":
            art = "" if bare else "the"
        elif det == "dies":
            art = "these" if self.plural else "this"
        elif det in _POSS:
            art = _POSS[det]
        elif det == "num":
            art = self.count[1]
        elif det == "viele":
            art = "many"
        elif det == "einige":
            art = "some"
        elif det == "kein" and kein == "no":
            art = "no"
        elif det in ("indef", "kein") and not self.plural and not noun.mass:
            art = _a_an(body[0])
        else:
            art = ""
        return " ".join(w for w in [art] + body if w)


def _pronoun(key: str) -> NP:
    de, en, agr = _PRONOUNS[key]
    return NP(fixed=(de, en, agr, None), pron_key=key)


def _name(name: str, sex: str) -> NP:
    return NP(fixed=(name, name, "3sg", sex))


def noun_phrase(noun: str, case: str = "nom", det: str = "def", adj: str | None = None,
                plural: bool = False, count: str | None = None,
                intens: str | None = None) -> tuple[str, str]:
    """Render a German noun phrase and its English translation.

    ``det`` is one of def, indef, kein, zero, dies, mein, dein, unser, viele,
    einige, or a German number word (zwei ... zwanzig) which implies plural.
    Example: ``noun_phrase("Hund", "acc", "def", "groß") ->
    ("den großen Hund", "the big dog")``.  A standalone kein-phrase is
    rendered "no ..." (inside a clause it becomes "does not ... a ...").
    """
    n = NOUNS[noun]
    cnt = None
    numbers = dict(_NUMBERS)
    if count is not None or det in numbers:
        word = count or det
        cnt, det, plural = (word, numbers[word]), "num", True
    if det in ("viele", "einige"):
        plural = True
    ints = None
    if intens:
        ints = (intens, dict(_INTENS)[intens])
    np_ = NP(n, det, plural, ADJS[adj] if adj else None, ints, cnt)
    return np_.de(case), np_.en(kein="no")


# ========================================================= prepositions
@dataclass(frozen=True)
class PP:
    de: str
    en: str
    front: bool = True   # may stand in the Vorfeld


def _pp(prep: str, case: str, np_: NP, en_prep: str, bare: bool = False) -> PP:
    art = np_.article_de(case)
    np_de = np_.de(case)
    if (prep, art) in _CONTRACT:
        np_de = _CONTRACT[(prep, art)] + np_de[len(art):]
    else:
        np_de = prep + " " + np_de
    bare = bare or (np_.noun is not None and "schoolish" in np_.noun.tags
                    and np_.det == "def" and np_.adj is None)
    return PP(np_de, (en_prep + " " if en_prep else "") + np_.en(bare=bare))


def place_phrase(noun: str, kind: str = "loc", det: str = "def", adj: str | None = None,
                 plural: bool = False) -> tuple[str, str]:
    """Locative ("im Park", "in the park") or directional ("in den Park",
    "to the park") phrase for a place noun, using its usual preposition."""
    np_ = NP(NOUNS[noun], det, plural, ADJS[adj] if adj else None)
    pp = _place_pp(np_, kind)
    return pp.de, pp.en


def _place_pp(np_: NP, kind: str) -> PP:
    place = PLACES[np_.noun.de]
    prep, en = place.loc if kind == "loc" else place.dir
    case = "dat" if kind == "loc" or prep in _DAT_PREPS else "acc"
    return _pp(prep, case, np_, en)


_HOME = {"home_l": PP("zu Hause", "at home"), "home_d": PP("nach Hause", "home"),
         "home_arr": PP("zu Hause", "home")}


# ================================================================= verbs
@dataclass(frozen=True)
class Verb:
    key: str
    prefix: str          # separable prefix ("an", "spazieren " with a space)
    inf: str             # infinitive without the prefix
    s3: str              # 3rd singular present without the prefix
    part: str            # full participle
    aux: str             # "h" (haben) or "s" (sein)
    en: str              # English base form, may include a particle
    en_past: str
    frame: str
    subj: str            # subject tags
    obj: str = ""        # object tags (acc / dat-only / prep object)
    dat: str = ""        # recipient tags for ditransitives
    loc: tuple = ()      # locative specs
    dirs: tuple = ()     # directional specs (obligatory for frame "m")
    com: tuple = ()      # comitative / instrument specs
    prep: tuple = ()     # (German prep, case) of a prepositional object
    s1: str = ""
    praet: tuple = ()    # (sg, pl) simple past, used instead of the perfect
    en_over: tuple = ()  # ((tag, english, english past), ...) by object tag
    loc_req: bool = False
    spot: str = ""       # posture for position / placement verbs
    en_be: bool = False

    @property
    def pl(self) -> str:
        return self.inf

    @property
    def first(self) -> str:
        if self.s1:
            return self.s1
        stem = self.inf[:-2] if self.inf.endswith("en") else self.inf[:-1]
        return stem + "e"

    @property
    def inf_full(self) -> str:
        return self.prefix + self.inf

    @property
    def zu_inf(self) -> str:
        if not self.prefix:
            return "zu " + self.inf
        if self.prefix.endswith(" "):
            return self.prefix + "zu " + self.inf
        return self.prefix + "zu" + self.inf

    def en_forms(self, obj: NP | None = None) -> tuple[str, str, str]:
        base, past = self.en, self.en_past
        if obj is not None and obj.noun is not None:
            for tag, b, p in self.en_over:
                if tag in obj.noun.tags:
                    base, past = b, p
                    break
        return base, _en_third(base), past


def _V(de: str, s3: str, part: str, aux: str, en: str, en_past: str, frame: str,
       subj: str, key: str = "", **kw) -> Verb:
    prefix, _, inf = de.rpartition("|")
    for name in ("loc", "dirs", "com"):
        if name in kw:
            kw[name] = tuple(kw[name])
    return Verb(key or (prefix.strip() + inf), prefix, inf, s3, part, aux, en, en_past,
                frame, subj, **kw)


# Locative / directional specs: "L:act" place locative for places with the
# activity, "D:act" directional, "home_l"/"home_d"/"home_arr", "city_l",
# "city_d", "city_s", or (German prep, case, English prep, noun tags).
_VERB_LIST = [
    # ---- intransitive
    _V("schlafen", "schläft", "geschlafen", "h", "sleep", "slept", "i", "person baby",
       loc=["L:sleep", "home_l"]),
    _V("schlafen", "schläft", "geschlafen", "h", "sleep", "slept", "i", "animal",
       key="schlafen_a"),
    _V("arbeiten", "arbeitet", "gearbeitet", "h", "work", "worked", "i", "adult",
       loc=["L:work", "home_l"]),
    _V("spielen", "spielt", "gespielt", "h", "play", "played", "i", "child pet",
       loc=["L:play", "home_l"], com=[("mit", "dat", "with", "child pet toy")]),
    _V("tanzen", "tanzt", "getanzt", "h", "dance", "danced", "i", "person",
       loc=["L:dance"], com=[("mit", "dat", "with", "person")]),
    _V("singen", "singt", "gesungen", "h", "sing", "sang", "i", "person bird", loc=["L:sing"]),
    _V("lachen", "lacht", "gelacht", "h", "laugh", "laughed", "i", "person baby"),
    _V("weinen", "weint", "geweint", "h", "cry", "cried", "i", "person baby"),
    _V("lächeln", "lächelt", "gelächelt", "h", "smile", "smiled", "i", "person baby", s1="lächle"),
    _V("warten", "wartet", "gewartet", "h", "wait", "waited", "i", "person pet",
       loc=["L:wait", "home_l"]),
    _V("schwimmen", "schwimmt", "geschwommen", "s", "swim", "swam", "i", "person swimmer",
       loc=[("in", "dat", "in", "swimplace")]),
    _V("bellen", "bellt", "gebellt", "h", "bark", "barked", "i", "dog", loc=["L:bark"]),
    _V("essen", "isst", "gegessen", "h", "eat", "ate", "i", "person", key="essen_i",
       loc=["L:eat", "home_l"], com=[("mit", "dat", "with", "person")]),
    _V("lesen", "liest", "gelesen", "h", "read", "read", "i", "person", key="lesen_i",
       loc=["L:read", "home_l"]),
    _V("kochen", "kocht", "gekocht", "h", "cook", "cooked", "i", "adult", key="kochen_i",
       loc=["L:cook", "home_l"]),
    _V("ein|kaufen", "kauft", "eingekauft", "h", "go shopping", "went shopping", "i", "adult",
       loc=["L:shop"]),
    _V("spazieren |gehen", "geht", "spazieren gegangen", "s", "go for a walk",
       "went for a walk", "i", "person", loc=["L:walk"],
       com=[("mit", "dat", "with", "person dog")]),
    _V("fern|sehen", "sieht", "ferngesehen", "h", "watch TV", "watched TV", "i", "person",
       loc=["home_l"]),
    _V("auf|stehen", "steht", "aufgestanden", "s", "get up", "got up", "i", "person"),
    _V("auf|wachen", "wacht", "aufgewacht", "s", "wake up", "woke up", "i", "person baby animal"),
    _V("ein|schlafen", "schläft", "eingeschlafen", "s", "fall asleep", "fell asleep", "i",
       "person baby pet", loc=["L:rest"]),
    _V("ab|fahren", "fährt", "abgefahren", "s", "leave", "left", "i", "depart adult"),
    _V("sitzen", "sitzt", "gesessen", "h", "sit", "sat", "i", "person", loc=["L:sit"],
       loc_req=True, praet=("saß", "saßen")),
    _V("bleiben", "bleibt", "geblieben", "s", "stay", "stayed", "i", "person",
       loc=["home_l", "L:stay"], loc_req=True),
    _V("lernen", "lernt", "gelernt", "h", "study", "studied", "i", "child student",
       loc=["L:study", "home_l"]),
    _V("an|kommen", "kommt", "angekommen", "s", "arrive", "arrived", "i", "person",
       loc=["A:arrive", "home_arr", "city_l"]),
    _V("an|kommen", "kommt", "angekommen", "s", "arrive", "arrived", "i", "depart",
       key="ankommen_v", loc=["city_l"]),
    _V("zurück|kommen", "kommt", "zurückgekommen", "s", "come back", "came back", "i",
       "person pet", loc=["city_s", "home_d"]),
    # ---- motion with an obligatory direction
    _V("gehen", "geht", "gegangen", "s", "go", "went", "m", "person",
       dirs=["D:go", "home_d"], com=[("mit", "dat", "with", "person dog")]),
    _V("laufen", "läuft", "gelaufen", "s", "run", "ran", "m", "person pet",
       dirs=["D:run", "home_d", ("durch", "acc", "through", "through")]),
    _V("laufen", "läuft", "gelaufen", "s", "run", "ran", "m", "wild", key="laufen_w",
       dirs=[("durch", "acc", "through", "wood")]),
    _V("fahren", "fährt", "gefahren", "s", "travel", "traveled", "m", "adult",
       dirs=["city_d"], com=["instr"]),
    _V("fliegen", "fliegt", "geflogen", "s", "fly", "flew", "m", "adult", dirs=["city_d"]),
    _V("fliegen", "fliegt", "geflogen", "s", "fly", "flew", "m", "bird", key="fliegen_b",
       dirs=[("über", "acc", "over", "flyover")]),
    _V("kommen", "kommt", "gekommen", "s", "come", "came", "m", "person pet",
       dirs=["home_d", "D:come"]),
    _V("klettern", "klettert", "geklettert", "s", "climb", "climbed", "m", "child climber",
       dirs=[("auf", "acc", "up", "climb")]),
    _V("springen", "springt", "gesprungen", "s", "jump", "jumped", "m", "child dog",
       dirs=[("in", "acc", "into", "swimplace")]),
    _V("springen", "springt", "gesprungen", "s", "jump", "jumped", "m", "jumper",
       key="springen_p", dirs=[("auf", "acc", "onto", "jumpon")]),
    # ---- transitive
    _V("lesen", "liest", "gelesen", "h", "read", "read", "t", "person", obj="read",
       loc=["L:read"]),
    _V("schreiben", "schreibt", "geschrieben", "h", "write", "wrote", "t", "person",
       obj="write", loc=["L:read", "home_l"]),
    _V("kaufen", "kauft", "gekauft", "h", "buy", "bought", "t", "adult",
       obj="thing food drink own furniture", loc=["L:shop"]),
    _V("verkaufen", "verkauft", "verkauft", "h", "sell", "sold", "t", "adult",
       obj="thing own furniture fruit"),
    _V("essen", "isst", "gegessen", "h", "eat", "ate", "t", "person", obj="food",
       loc=["L:eat", "home_l"]),
    _V("fressen", "frisst", "gefressen", "h", "eat", "ate", "t", "animal", obj="afood"),
    _V("trinken", "trinkt", "getrunken", "h", "drink", "drank", "t", "person", obj="drink",
       loc=["L:eat", "home_l"]),
    _V("kochen", "kocht", "gekocht", "h", "cook", "cooked", "t", "adult", obj="cook brew",
       en_over=[("brew", "make", "made")], loc=["L:cook"]),
    _V("backen", "backt", "gebacken", "h", "bake", "baked", "t", "adult", obj="bake"),
    _V("sehen", "sieht", "gesehen", "h", "see", "saw", "t", "person",
       obj="person animal own building film landmark",
       en_over=[("film", "watch", "watched")]),
    _V("finden", "findet", "gefunden", "h", "find", "found", "t", "person pet",
       obj="thing pet", loc=["L:play"]),
    _V("suchen", "sucht", "gesucht", "h", "look for", "looked for", "t", "person pet",
       obj="thing pet seek person", loc=["L:play"]),
    _V("tragen", "trägt", "getragen", "h", "carry", "carried", "t", "person", obj="carry"),
    _V("brauchen", "braucht", "gebraucht", "h", "need", "needed", "t", "person",
       obj="thing food drink own"),
    _V("öffnen", "öffnet", "geöffnet", "h", "open", "opened", "t", "person", obj="open"),
    _V("schließen", "schließt", "geschlossen", "h", "close", "closed", "t", "person",
       obj="close"),
    _V("waschen", "wäscht", "gewaschen", "h", "wash", "washed", "t", "person", obj="wash"),
    _V("putzen", "putzt", "geputzt", "h", "clean", "cleaned", "t", "person", obj="cleanroom"),
    _V("malen", "malt", "gemalt", "h", "paint", "painted", "t", "person", obj="paint",
       loc=["L:play"]),
    _V("zeichnen", "zeichnet", "gezeichnet", "h", "draw", "drew", "t", "person", obj="paint",
       loc=["L:play"]),
    _V("lieben", "liebt", "geliebt", "h", "love", "loved", "t", "person",
       obj="kin friend pet music city"),
    _V("mögen", "mag", "gemocht", "h", "like", "liked", "t", "person",
       obj="person animal food drink music game", s1="mag"),
    _V("kennen", "kennt", "gekannt", "h", "know", "knew", "t", "person", obj="person city"),
    _V("besuchen", "besucht", "besucht", "h", "visit", "visited", "t", "person",
       obj="kin friend visit city"),
    _V("treffen", "trifft", "getroffen", "h", "meet", "met", "t", "person", obj="person",
       loc=["L:meet"]),
    _V("fragen", "fragt", "gefragt", "h", "ask", "asked", "t", "person", obj="person"),
    _V("an|rufen", "ruft", "angerufen", "h", "call", "called", "t", "person", obj="person"),
    _V("ein|laden", "lädt", "eingeladen", "h", "invite", "invited", "t", "adult", obj="person"),
    _V("ab|holen", "holt", "abgeholt", "h", "pick up", "picked up", "t", "adult", obj="person",
       loc=[("von", "dat", "from", "pickup")]),
    _V("füttern", "füttert", "gefüttert", "h", "feed", "fed", "t", "person", obj="animal",
       loc=["L:walk"]),
    _V("fangen", "fängt", "gefangen", "h", "catch", "caught", "t", "person pet", obj="catch"),
    _V("jagen", "jagt", "gejagt", "h", "chase", "chased", "t", "predator", obj="prey"),
    _V("werfen", "wirft", "geworfen", "h", "throw", "threw", "t", "person", obj="throw"),
    _V("halten", "hält", "gehalten", "h", "hold", "held", "t", "person", obj="hold"),
    _V("verlieren", "verliert", "verloren", "h", "lose", "lost", "t", "person", obj="lose",
       loc=["L:walk"]),
    _V("vergessen", "vergisst", "vergessen", "h", "forget", "forgot", "t", "person",
       obj="lose"),
    _V("nehmen", "nimmt", "genommen", "h", "take", "took", "t", "person", obj="thing food"),
    _V("holen", "holt", "geholt", "h", "fetch", "fetched", "t", "person", obj="thing drink"),
    _V("bauen", "baut", "gebaut", "h", "build", "built", "t", "person", obj="build"),
    _V("reparieren", "repariert", "repariert", "h", "fix", "fixed", "t", "adult",
       obj="repair"),
    _V("hören", "hört", "gehört", "h", "hear", "heard", "t", "person",
       obj="noisy song music", en_over=[("music", "listen to", "listened to")]),
    _V("verstecken", "versteckt", "versteckt", "h", "hide", "hid", "t", "person",
       obj="lose gift"),
    _V("bezahlen", "bezahlt", "bezahlt", "h", "pay", "paid", "t", "adult", obj="pay"),
    _V("schicken", "schickt", "geschickt", "h", "send", "sent", "t", "person", obj="send"),
    _V("beobachten", "beobachtet", "beobachtet", "h", "watch", "watched", "t", "person",
       obj="animal person", loc=["L:walk"]),
    _V("fotografieren", "fotografiert", "fotografiert", "h", "photograph", "photographed",
       "t", "person", obj="animal landmark outdoor"),
    _V("vermissen", "vermisst", "vermisst", "h", "miss", "missed", "t", "person",
       obj="kin friend pet city"),
    _V("haben", "hat", "gehabt", "h", "have", "had", "t", "person", obj="have",
       praet=("hatte", "hatten")),
    _V("haben", "hat", "gehabt", "h", "have", "had", "t", "pet", key="haben_p", obj="toy",
       praet=("hatte", "hatten")),
    _V("auf|räumen", "räumt", "aufgeräumt", "h", "tidy up", "tidied up", "t", "person",
       obj="tidy"),
    _V("an|ziehen", "zieht", "angezogen", "h", "put on", "put on", "t", "person", obj="wear"),
    _V("aus|ziehen", "zieht", "ausgezogen", "h", "take off", "took off", "t", "person",
       obj="wear"),
    _V("spielen", "spielt", "gespielt", "h", "play", "played", "t", "person", key="spielen_g",
       obj="game", loc=["L:play"]),
    _V("sprechen", "spricht", "gesprochen", "h", "speak", "spoke", "t", "person", obj="lang"),
    _V("lernen", "lernt", "gelernt", "h", "learn", "learned", "t", "person", key="lernen_l",
       obj="lang"),
    _V("verstehen", "versteht", "verstanden", "h", "understand", "understood", "t", "person",
       obj="lang person"),
    _V("bekommen", "bekommt", "bekommen", "h", "get", "got", "t", "person", obj="send gift"),
    # ---- ditransitive: dative recipient + accusative theme
    _V("geben", "gibt", "gegeben", "h", "give", "gave", "d", "person", dat="person",
       obj="thing food"),
    _V("zeigen", "zeigt", "gezeigt", "h", "show", "showed", "d", "person", dat="person",
       obj="show"),
    _V("schicken", "schickt", "geschickt", "h", "send", "sent", "d", "person",
       key="schicken_d", dat="person", obj="send"),
    _V("erzählen", "erzählt", "erzählt", "h", "tell", "told", "d", "person", dat="person",
       obj="tell"),
    _V("kaufen", "kauft", "gekauft", "h", "buy", "bought", "d", "adult", key="kaufen_d",
       dat="child kin friend", obj="thing food"),
    _V("bringen", "bringt", "gebracht", "h", "bring", "brought", "d", "person",
       dat="person", obj="thing food drink"),
    # ---- dative object only
    _V("helfen", "hilft", "geholfen", "h", "help", "helped", "dt", "person", obj="person"),
    _V("danken", "dankt", "gedankt", "h", "thank", "thanked", "dt", "person", obj="person"),
    _V("folgen", "folgt", "gefolgt", "s", "follow", "followed", "dt", "person animal",
       obj="person animal"),
    _V("antworten", "antwortet", "geantwortet", "h", "answer", "answered", "dt", "person",
       obj="person"),
    _V("gehören", "gehört", "gehört", "h", "belong to", "belonged to", "dt", "have own",
       obj="person", praet=("gehörte", "gehörten")),
    # ---- prepositional object
    _V("warten", "wartet", "gewartet", "h", "wait for", "waited for", "po", "person",
       key="warten_p", prep=("auf", "acc"), obj="person wait4"),
    _V("denken", "denkt", "gedacht", "h", "think about", "thought about", "po", "person",
       prep=("an", "acc"), obj="person event city"),
    _V("sprechen", "spricht", "gesprochen", "h", "talk to", "talked to", "po", "person",
       key="sprechen_m", prep=("mit", "dat"), obj="person"),
    _V("sprechen", "spricht", "gesprochen", "h", "talk about", "talked about", "po", "person",
       key="sprechen_u", prep=("über", "acc"), obj="media event city"),
    _V("auf|passen", "passt", "aufgepasst", "h", "look after", "looked after", "po", "adult",
       prep=("auf", "acc"), obj="child baby pet"),
    _V("träumen", "träumt", "geträumt", "h", "dream about", "dreamed about", "po", "person",
       prep=("von", "dat"), obj="event pet city"),
    # ---- placement (accusative object + accusative direction)
    _V("legen", "legt", "gelegt", "h", "put", "put", "pl", "person", obj="lie", spot="lie"),
    _V("stellen", "stellt", "gestellt", "h", "put", "put", "pl", "person", obj="stand",
       spot="stand"),
    _V("hängen", "hängt", "gehängt", "h", "hang", "hung", "pl", "person", key="haengen_t",
       obj="hang", spot="hang"),
    # ---- position (dative location; English "be")
    _V("liegen", "liegt", "gelegen", "h", "be", "was", "ps", "lie lieanimal", spot="lie",
       praet=("lag", "lagen"), en_be=True),
    _V("stehen", "steht", "gestanden", "h", "be", "was", "ps", "stand", spot="stand",
       praet=("stand", "standen"), en_be=True),
    _V("hängen", "hängt", "gehangen", "h", "be", "was", "ps", "hang", spot="hang",
       praet=("hing", "hingen"), en_be=True),
    # ---- copula, existential
    _V("sein", "ist", "gewesen", "s", "be", "was", "cop", "person animal thing furniture "
       "vehicle place food drink media", s1="bin", praet=("war", "waren"), en_be=True),
    _V("geben", "gibt", "gegeben", "h", "be", "was", "ex", "", key="es_gibt",
       praet=("gab", "gaben"), en_be=True),
]
VERBS = {v.key: v for v in _VERB_LIST}
assert len(VERBS) == len(_VERB_LIST), "duplicate verb keys"
_FRAME_VERBS = {}
for _v in _VERB_LIST:
    _FRAME_VERBS.setdefault(_v.frame, []).append(_v)

# (German prep, English prep, noun tags) where things lie / stand / hang
_SPOTS = {
    "lie": [("auf", "on", "surface"), ("unter", "under", "surface"),
            ("neben", "next to", "surface"), ("in", "in", "container")],
    "stand": [("auf", "on", "surface"), ("neben", "next to", "surface"),
              ("unter", "under", "surface")],
    "hang": [("an", "on", "wall")],
    "hang_wear": [("an", "on", "door"), ("in", "in", "wardrobe")],
}
# which animal eats what (frame "fressen")
_EATS = {"Hund": "Knochen", "Katze": "Fisch Maus", "Kaninchen": "Karotte",
         "Pferd": "Apfel Karotte", "Affe": "Banane", "Maus": "Käse", "Bär": "Fisch",
         "Elefant": "Banane Apfel", "Fuchs": "Maus Ente"}

_AUX = {"h": ("habe", "hat", "haben"), "s": ("bin", "ist", "sind")}
_WERDEN = ("werde", "wird", "werden")


def _agr_idx(agr: str) -> int:
    return {"1sg": 0, "3sg": 1, "pl": 2}[agr]


# ================================================================ clauses
@dataclass
class Clause:
    verb: Verb
    subj: NP
    tense: str = "pres"          # pres | past | fut
    modal: str | None = None     # kann muss will möchte
    neg: bool = False
    dat: NP | None = None
    acc: NP | None = None
    pobj: PP | None = None       # prepositional object (English NP only)
    com: PP | None = None        # comitative / instrument
    loc: PP | None = None        # optional locative adjunct
    comp: PP | None = None       # direction, location or predicate adjective
    time: tuple | None = None    # (German, English)
    mid: tuple | None = None     # frequency adverb (German, English) or ("gern", ...)
    front: str = "subj"          # subj time loc obj mid comp
    rel: PP | None = None        # relative clause attached to the object (", der ...")
    there: bool = False          # English "there is" rendering (position verbs)

    # ------------------------------------------------------------ German
    @property
    def kein_used(self) -> bool:
        return any(x is not None and x.det == "kein" for x in (self.acc, self.subj))

    @property
    def gern(self) -> bool:
        return self.mid is not None and self.mid[0] == "gern"

    def _subj_de(self) -> str:
        return "es" if self.verb.frame == "ex" else self.subj.de("nom")

    def _fin_agr(self) -> str:
        return "3sg" if self.verb.frame == "ex" else self.subj.agr

    def _finite(self) -> str:
        """Finite verb form (without separable prefix)."""
        v, i = self.verb, _agr_idx(self._fin_agr())
        if self.modal:
            pres, past = _MODALS[self.modal]
            forms = pres if self.tense == "pres" else past
            return forms[1] if i == 2 else forms[0]
        if self.tense == "fut":
            return _WERDEN[i]
        if self.tense == "past":
            if v.praet:
                return v.praet[1] if i == 2 else v.praet[0]
            return _AUX[v.aux][i]
        return (v.first, v.s3, "sind" if v.inf == "sein" else v.pl)[i]

    def _nonfinite(self) -> str:
        v = self.verb
        if self.modal or self.tense == "fut":
            return v.inf_full
        if self.tense == "past" and not v.praet:
            return v.part
        return ""

    def _midfield(self, exclude: set) -> list:
        items = []
        late_subj = not self.subj.definite and self.verb.frame != "ex"
        if "subj" not in exclude and not late_subj:
            items.append(self._subj_de())
        if self.time and "time" not in exclude:
            items.append(self.time[0])
        if "subj" not in exclude and late_subj:
            items.append(self._subj_de())
        if self.dat is not None:
            items.append(self.dat.de("dat"))
        acc_def = self.acc is not None and self.acc.definite
        if acc_def and "obj" not in exclude:
            items.append(self.acc.de("acc"))
        if self.mid and "mid" not in exclude:
            items.append(self.mid[0])
        if self.neg and not self.kein_used:
            items.append("nicht")
        if self.acc is not None and not acc_def and "obj" not in exclude:
            items.append(self.acc.de("acc"))
        if self.com:
            items.append(self.com.de)
        if self.loc and "loc" not in exclude:
            items.append(self.loc.de)
        if self.pobj:
            items.append(self.pobj.de)
        if self.comp and "comp" not in exclude:
            items.append(self.comp.de)
        return items

    def _vorfeld(self) -> tuple[str, set]:
        f = self.front
        if f == "time":
            return self.time[0], {"time"}
        if f == "loc":
            return self.loc.de, {"loc"}
        if f == "comp":
            return self.comp.de, {"comp"}
        if f == "obj":
            return self.acc.de("acc"), {"obj"}
        if f == "mid":
            return self.mid[0], {"mid"}
        return self._subj_de(), {"subj"}

    def de_main(self, vorfeld: str | None = None) -> str:
        """Verb-second main clause; ``vorfeld`` overrides the first position
        (e.g. a fronted subordinate clause), pushing the subject after the verb."""
        if vorfeld is None:
            vorfeld, exclude = self._vorfeld()
        else:
            exclude = set()
        words = [vorfeld, self._finite()] + self._midfield(exclude)
        if self.modal or self.tense == "fut" or (self.tense == "past" and not self.verb.praet):
            words.append(self._nonfinite())
        else:
            words.append(self.verb.prefix.strip())
        out = _join(words)
        if self.rel:
            out += ", " + self.rel.de
        return out

    def de_sub(self, intro: str) -> str:
        """Verb-final clause introduced by ``intro`` (conjunction or relative
        pronoun); an empty intro gives a bare verb-final clause."""
        words = [intro] + self._midfield(set())
        nonfin = self._nonfinite()
        if nonfin:
            words += [nonfin, self._finite()]
        else:
            words.append(self.verb.prefix + self._finite())
        return _join(words)

    def de_zu(self) -> str:
        """um ... zu infinitive clause body (no subject)."""
        return _join(["um"] + self._midfield({"subj"}) + [self.verb.zu_inf])

    # ----------------------------------------------------------- English
    def _en_verb(self, agr: str) -> list:
        v = self.verb
        base, s3, past = v.en_forms(self.acc)
        neg = (self.neg or self.kein_used) and v.frame != "ex"
        mid = [self.mid[1]] if self.mid and not self.gern else []
        i = _agr_idx(agr)
        if v.en_be:
            if self.tense == "past":
                be = "were" if i == 2 else "was"
            else:
                be = ("am", "is", "are")[i]
            return [be] + (["not"] if neg else []) + mid
        if self.modal:
            m, past_t = self.modal, self.tense == "past"
            if m == "kann":
                aux = ("could not" if neg else "could") if past_t else ("cannot" if neg else "can")
            elif m == "möchte":
                aux = "would not like to" if neg else "would like to"
            else:
                word = {"muss": "have to", "will": "want to"}[m]
                if past_t:
                    aux = "did not " + word if neg else _en_past_of(word)
                elif neg:
                    aux = ("does not " if i == 1 else "do not ") + word
                else:
                    aux = _en_third(word) if i == 1 else word
            return [aux, base]
        if self.tense == "fut":
            return ["will"] + (["not"] if neg else []) + [base]
        if self.tense == "past":
            return ["did not", base] if neg else mid + [past]
        if self.gern:
            return ["likes to" if i == 1 else "like to", base]
        if neg:
            return ["does not" if i == 1 else "do not", base]
        return mid + [s3 if i == 1 else base]

    def en(self, front: bool = True) -> str:
        """English clause; with ``front`` a fronted German time adverbial is
        fronted in English too."""
        v = self.verb
        time_front = front and self.front == "time" and self.time is not None
        words = [self.time[1]] if time_front else []
        if v.frame == "ex" or self.there:
            np_ = self.acc if v.frame == "ex" else self.subj
            words += ["there"] + self._en_verb(np_.agr if not np_.noun.mass else "3sg")
            words.append(np_.en(kein="no"))
            if self.comp:
                words.append(self.comp.en)
            if self.loc:
                words.append(self.loc.en)
        else:
            words.append(self.subj.en())
            words += self._en_verb(self.subj.agr)
            if self.dat is not None:
                words.append(self.dat.en())
            if self.acc is not None:
                words.append(self.acc.en())
                if self.rel:
                    words.append(self.rel.en)
            for pp in (self.pobj, self.comp, self.com, self.loc):
                if pp:
                    words.append(pp.en)
        if self.time and not time_front:
            words.append(self.time[1])
        return _join(words)

    def en_zu(self) -> str:
        base = self.verb.en_forms(self.acc)[0]
        words = ["to", base]
        if self.acc is not None:
            words.append(self.acc.en())
        for pp in (self.pobj, self.comp, self.com, self.loc):
            if pp:
                words.append(pp.en)
        return _join(words)


def _en_past_of(word: str) -> str:
    return {"have to": "had to", "want to": "wanted to"}[word]


def _join(words) -> str:
    return " ".join(w for w in words if w)


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + "."


# ============================================================== generation
class _Gen:
    """Random sentence generator; all randomness comes from ``rng``."""

    def __init__(self, rng: random.Random):
        self.r = rng

    # ----------------------------------------------------------- helpers
    def p(self, prob: float) -> bool:
        return self.r.random() < prob

    def choice(self, seq):
        return seq[self.r.randrange(len(seq))]

    def wchoice(self, items, weights):
        return self.r.choices(items, weights)[0]

    def noun(self, tags: str, exclude=()) -> Noun | None:
        cands = [n for n in _nouns_with(tags) if n.de not in exclude]
        return self.choice(cands) if cands else None

    def adj_for(self, np_: NP, p: float = 0.36):
        if np_.noun is None or "bare" in np_.noun.tags or not self.p(p):
            return
        cands = _adjs_for(np_.noun)
        if not cands:
            return
        np_.adj = self.choice(cands)
        if np_.adj.gradable and np_.det != "kein" and self.p(0.15):
            np_.intens = self.choice(_INTENS)

    def np(self, noun: Noun, role: str = "obj", neg: bool = False, kein_ok: bool = False,
           adj_p: float = 0.36, dets: str | None = None, plural_ok: bool = True) -> NP:
        """Build an NP for ``noun``.  With ``neg`` the NP is either turned into
        a kein-phrase (when ``kein_ok``) or restricted to definite determiners."""
        r = self.r
        np_ = NP(noun)
        tags = noun.tags
        if "bare" in tags:
            np_.det = "kein" if neg else "zero"
            return np_
        if noun.mass:
            opts, w = ["zero", "def", "mein", "unser", "dies"], [40, 40, 6, 6, 8]
        elif noun.pl is None:
            opts, w = ["def", "indef", "mein", "dies"], [45, 40, 8, 7]
        else:
            np_.plural = (plural_ok and "solo" not in tags
                          and r.random() < (0.25 if role == "pp" else 0.33))
            if np_.plural:
                opts, w = ["def", "zero", "num", "mein", "unser", "dies", "viele", "einige"], \
                    [36, 18, 22, 7, 5, 5, 5, 2]
            else:
                opts, w = ["def", "indef", "mein", "unser", "dein", "dies"], \
                    [50, 26, 10, 5, 3, 6]
        if "kin" in tags and r.random() < 0.6:
            opts, w = ["mein", "unser", "dein"], [6, 3, 1]
        if "noposs" in tags:
            pairs = [(o, x) for o, x in zip(opts, w) if o not in _POSS]
            opts, w = zip(*pairs)
        if role == "subj" or tags & {"person", "baby"}:
            pairs = [(o, x) for o, x in zip(opts, w) if o != "zero" or noun.mass]
            opts, w = zip(*pairs)
        if role != "subj" and "kin" not in tags:   # "my" is rarer on objects
            w = [x / 3 if o in _POSS else x for o, x in zip(opts, w)]
        if dets:
            allowed = dets.split()
            pairs = [(o, x) for o, x in zip(opts, w) if o in allowed]
            if not pairs:
                pairs = [(allowed[0], 1)]
            opts, w = zip(*pairs)
        if neg:
            if kein_ok and r.random() < 0.55:
                np_.det = "kein"
                self.adj_for(np_, adj_p)
                return np_
            pairs = [(o, x) for o, x in zip(opts, w) if o in _DEF_LIKE] or [("def", 1)]
            opts, w = zip(*pairs)
        np_.det = self.wchoice(list(opts), list(w))
        if np_.det == "num":
            np_.count = self.wchoice(_NUMBERS, _NUMBER_WEIGHTS)
        self.adj_for(np_, adj_p)
        return np_

    def subject(self, tags: str, neg: bool = False, exclude=(), pron_p: float = 0.14,
                name_p: float = 0.12) -> NP:
        want = set(tags.split())
        human = bool(want & {"person", "adult", "child"})
        if human and self.p(pron_p):
            key = self.wchoice(["ich", "wir", "er", "sie", "sie_pl"], [3, 2, 3, 3, 3])
            return _pronoun(key)
        if human and self.p(name_p):
            name, sex = self.choice(_NAMES)
            if name not in exclude:
                return _name(name, sex)
        noun = self.noun(tags, exclude)
        dets = None if not neg else "def mein unser dein dies"
        np_ = self.np(noun, "subj", dets=dets)
        return np_

    def person_obj(self, tags: str, exclude=(), neg=False, case="acc") -> NP:
        if self.p(0.15):
            name, sex = self.choice([x for x in _NAMES if x[0] not in exclude])
            return _name(name, sex)
        noun = self.noun(tags, exclude)
        return self.np(noun, "obj", dets="def mein unser dein dies" if neg else None)

    def city(self) -> tuple:
        return self.choice(_CITIES)

    def spec_pp(self, spec, subj: NP | None = None, exclude=()) -> PP | None:
        """Build a PP from a locative/directional spec."""
        if spec == "instr":
            noun = self.noun("transport")
            return _pp("mit", "dat", NP(noun), "by", bare=True)
        if isinstance(spec, tuple):
            prep, case, en_prep, tags = spec
            noun = self.noun(tags, exclude)
            if noun is None:
                return None
            if "person" in tags.split() and self.p(0.15):
                name, sex = self.choice(_NAMES)
                return PP(prep + " " + name, en_prep + " " + name)
            np_ = self.np(noun, "pp", dets="def mein unser dies", adj_p=0.2,
                          plural_ok=prep == "mit")
            pp = _pp(prep, case, np_, en_prep)
            if case != "dat" or prep not in ("in", "an", "auf"):
                pp = PP(pp.de, pp.en, False)
            return pp
        if spec in _HOME:
            return _HOME[spec]
        if spec.startswith("city"):
            de, en = self.city()
            prep = {"city_l": ("in", "in"), "city_d": ("nach", "to"),
                    "city_s": ("aus", "from")}[spec]
            return PP(prep[0] + " " + de, prep[1] + " " + en)
        kind, act = spec.split(":")
        places = [n for n in _places_with(act) if n.de not in exclude]
        if not places:
            return None
        noun = self.choice(places)
        np_ = NP(noun, self.wchoice(["def", "indef", "unser", "mein", "dies"],
                                    [76, 6, 7, 6, 5]))
        if np_.det in _POSS and "noposs" in noun.tags:
            np_.det = "def"
        if np_.det == "indef" and noun.tags & {"room", "have", "furniture"}:
            np_.det = "def"
        if noun.de in ("Stadt", "Schule") or kind == "A":
            np_.det = "def"
        self.adj_for(np_, 0.15)
        if kind == "L":
            return _place_pp(np_, "loc")
        if kind == "A":   # arrive: German locative, English "at"
            pp = _place_pp(np_, "loc")
            return PP(pp.de, "at " + np_.en())
        return _place_pp(np_, "dir")

    def spot_pp(self, posture: str, case: str, noun: Noun | None,
                exclude=()) -> PP | None:
        animal = noun is not None and "animal" in noun.tags
        if posture == "hang" and noun is not None and "wear" in noun.tags:
            posture = "hang_wear"
        spots = [s for s in _SPOTS[posture] if not (animal and s[2] == "container")]
        prep, en_prep, tags = self.choice(spots)
        if animal:
            tags = "jumpon"
        noun = self.noun(tags, exclude)
        if noun is None:
            return None
        np_ = NP(noun, self.wchoice(["def", "mein", "unser", "dies"], [80, 8, 6, 6]))
        if np_.det in _POSS and "noposs" in noun.tags:
            np_.det = "def"
        self.adj_for(np_, 0.15)
        return _pp(prep, case, np_, en_prep)

    # ---------------------------------------------------- tense / adverbs
    def pick_tense(self, verb: Verb) -> tuple[str, str | None]:
        if verb.frame in ("ps", "cop", "ex") or verb.key in _STATIVE:
            return self.wchoice(["pres", "past"], [60, 40]), None
        t = self.wchoice(["pres", "past", "fut", "modal"], [44, 32, 8, 16])
        if t != "modal":
            return t, None
        if verb.key in _NO_MODAL:
            return self.wchoice(["pres", "past", "fut"], [50, 40, 10]), None
        m = self.wchoice(["kann", "muss", "will", "möchte"], [4, 3, 3, 2])
        if m == "möchte":
            return "pres", m
        return self.wchoice(["pres", "past"], [60, 40]), m

    def pick_time(self, tense: str, modal: str | None) -> tuple | None:
        key = ("m" + tense) if modal else tense
        opts = [t for t in _TIMES if key in t[2].split()]
        # day names and clock times are many; keep the plain adverbs common
        t = self.choice(opts)
        if (t[0].startswith("um ") or t[0][3:] in dict(_DAYS)) and self.p(0.5):
            t = self.choice(opts)
        return (t[0], t[1])

    # ------------------------------------------------------------ clauses
    def clause(self, verb: Verb | None = None, subj: NP | None = None, tense=None,
               modal="auto", neg=None, time_p=0.45, mid_p=0.1, allow_front=True,
               force: dict | None = None) -> Clause | None:
        """A random simple clause for ``verb`` (random when None)."""
        force = force or {}
        if verb is None:
            frame = self.wchoice(["i", "m", "t", "d", "dt", "po", "pl", "ps", "cop", "ex"],
                                 [14, 11, 30, 7, 5, 5, 5, 6, 10, 5])
            verb = self.choice(_FRAME_VERBS[frame])
        if tense is None:
            tense, m = self.pick_tense(verb)
            if modal == "auto":
                modal = m
        if modal == "auto":
            modal = None
        if neg is None:
            neg = self.p(0.17)
        f = verb.frame
        if subj is None:
            if f == "ex":
                subj = _pronoun("es")
            else:
                subj = self.subject(verb.subj, neg=neg)
                if f in ("ps",) and not subj.definite and neg:
                    subj.det = "def"
        if neg and not subj.definite:
            neg = False
        cl = Clause(verb, subj, tense, modal, neg)
        sub_noun = subj.noun.de if subj.noun else subj.fixed[0]
        excl = (sub_noun,)

        if f in ("t", "d"):
            if "acc" in force:
                cl.acc = force["acc"]
            else:
                tags = verb.obj
                if verb.key == "fressen":
                    if subj.noun is None or subj.noun.de not in _EATS:
                        return None
                    noun = NOUNS[self.choice(_EATS[subj.noun.de].split())]
                else:
                    noun = self.noun(tags, excl)
                if noun is None:
                    return None
                if "person" in noun.tags and "person" in tags.split() and self.p(0.15):
                    cl.acc = self.person_obj(tags, excl, neg)
                elif verb.key in ("lieben", "kennen", "vermissen", "verstehen"):
                    cl.acc = self.np(noun, "obj", neg=neg, dets="def mein unser dein dies")
                elif verb.key == "mögen":
                    cl.acc = self.np(noun, "obj", neg=neg, kein_ok=noun.mass or "bare" in
                                     noun.tags, dets="def mein unser dies zero")
                elif verb.key in ("haben", "haben_p"):
                    cl.acc = self.np(noun, "obj", neg=neg, kein_ok=True,
                                     dets="indef def num zero viele")
                else:
                    cl.acc = self.np(noun, "obj", neg=neg, kein_ok=True)
            if f == "d":
                excl2 = excl + ((cl.acc.noun.de,) if cl.acc.noun else ())
                cl.dat = self.person_obj(verb.dat, excl2, neg, "dat")
        elif f == "dt":
            cl.dat = self.person_obj(verb.obj, excl, True)
            if verb.key == "gehören":
                if not subj.definite or subj.fixed:
                    subj.det = "def"
                    subj.plural = False
                cl.dat = self.person_obj("person", excl, True)
        elif f == "po":
            prep, case = verb.prep
            noun = self.noun(verb.obj, excl)
            if "person" in noun.tags and self.p(0.15):
                name, _ = self.choice([x for x in _NAMES if x[0] not in excl])
                cl.pobj = PP(prep + " " + name, name)
            elif "city" in verb.obj.split() and self.p(0.2):
                de, en = self.city()
                cl.pobj = PP(prep + " " + de, en)
            else:
                np_ = self.np(noun, "obj", dets="def mein unser dein dies")
                pp = _pp(prep, case, np_, "")
                cl.pobj = pp
        elif f == "pl":
            cl.acc = self.np(self.noun(verb.obj), "obj", neg=neg,
                             dets="def mein unser dies indef")
            if cl.acc.det == "kein":
                cl.acc.det = "def"
            cl.comp = self.spot_pp(verb.spot, "acc", cl.acc.noun, (cl.acc.noun.de,))
            if cl.comp is None:
                return None
        elif f == "ps":
            cl.comp = self.spot_pp(verb.spot, "dat", subj.noun, excl)
            if cl.comp is None:
                return None
            if subj.noun is not None and not subj.definite:
                cl.front, cl.there = "comp", True
        elif f == "cop":
            subj.adj = subj.intens = None
            if subj.noun is not None and not subj.definite:
                subj.det, subj.count = "def", None
            tags = subj.noun.tags if subj.noun is not None else {"person"}
            if tags & {"person", "pet"}:
                places = ["L:stay", "L:play", "L:sit", "home_l", "L:walk", "L:work"]
            elif tags & {"thing", "food", "drink", "furniture"} and "vehicle" not in tags:
                places = ["L:exist_in"]
            else:
                places = []
            if not places or self.p(0.65):
                noun = subj.noun
                cands = _adjs_for(noun) if noun else [a for a in _ADJ_LIST
                                                      if "person" in a.tags]
                if not cands:
                    return None
                adj = self.choice(cands)
                if noun is None:
                    adj = ADJS[self.choice(_PERSON_PRED)]
                word_de, word_en = adj.de, adj.en_for(noun or NOUNS["Frau"])
                if adj.gradable and self.p(0.25):
                    i = self.choice(_INTENS + ([("zu", "too")] if adj.de in _ZU_OK else []))
                    word_de, word_en = i[0] + " " + adj.de, i[1] + " " + word_en
                cl.comp = PP(word_de, word_en)
                if adj.de not in _STATE_ADJ:
                    time_p = mid_p = 0
            else:
                cl.comp = self.spec_pp(self.choice(places), subj, excl)
                if cl.comp is None:
                    return None
        elif f == "ex":
            act = self.choice(["exist_out", "exist_in"])
            place = NP(self.choice(_places_with(act)),
                       self.wchoice(["def", "unser", "mein"], [80, 10, 10]))
            self.adj_for(place, 0.15)
            cl.loc = _place_pp(place, "loc")
            tags = "bird pet" if act == "exist_out" else "thing food furniture"
            noun = self.noun(tags)
            cl.acc = self.np(noun, "obj", neg=neg, kein_ok=True,
                             dets="indef zero num viele einige")
            if neg:
                cl.acc.det = "kein"
                cl.acc.count = None
            if cl.acc.det not in ("indef", "zero", "num", "viele", "einige", "kein"):
                cl.acc.det = "zero" if cl.acc.plural or noun.mass else "indef"

        # optional adjuncts
        if f in ("i", "t") and verb.loc and "loc" not in force and "comp" not in force:
            if verb.loc_req or self.p(0.65):
                pp = self.spec_pp(self.choice(verb.loc), subj, excl)
                if pp is None:
                    return None
                if verb.loc_req:
                    cl.comp = pp
                else:
                    cl.loc = pp
        if f == "m" and "comp" not in force:
            cl.comp = self.spec_pp(self.choice(verb.dirs), subj, excl)
            if cl.comp is None:
                return None
        if verb.com and not neg and self.p(0.3):
            cl.com = self.spec_pp(self.choice(verb.com), subj, excl)
        for k in ("comp", "loc", "acc"):
            if k in force:
                setattr(cl, k, force[k])
        if f == "ex" and neg:
            cl.neg = True

        # tense-dependent adverbs
        if verb.key in _STATIVE:
            time_p = mid_p = 0
        if not cl.gern and time_p and self.p(time_p):
            cl.time = self.pick_time(tense, modal)
            if f in ("cop", "ps", "ex") and cl.time[0].startswith(("um ", "jeden", "in der")):
                cl.time = None
            if f == "ps" and cl.time and cl.time[0] not in ("heute", "gestern", "jetzt"):
                cl.time = None
        if (mid_p and not neg and not modal and tense != "fut" and cl.time is None
                and subj.definite and verb.key != "gehören" and self.p(mid_p)):
            human = subj.noun is None or "person" in subj.noun.tags
            if tense == "pres" and verb.key in _GERN_OK and human and self.p(0.35):
                cl.mid = ("gern", "")
            else:
                cl.mid = self.choice(_FREQ)
        if neg and cl.loc and f != "ex":
            # negated clauses keep the locative only when it is fronted
            if allow_front and cl.loc.front and self.p(0.5):
                cl.front = "loc"
            else:
                cl.loc = None
        if neg and cl.com:
            cl.com = None

        # fronting (topicalisation)
        if allow_front and cl.front == "subj":
            opts, w = ["subj"], [60]
            if cl.time:
                opts.append("time"), w.append(45)
            if cl.loc and cl.loc.front:
                opts.append("loc"), w.append(18)
            if (cl.acc is not None and f == "t" and cl.acc.noun is not None
                    and cl.acc.definite and not cl.acc.plural and cl.acc.noun.gender == "m"
                    and cl.acc.det != "kein" and not cl.rel):
                opts.append("obj"), w.append(6)
            if cl.mid and cl.mid[0] in ("oft", "manchmal"):
                opts.append("mid"), w.append(10)
            if f == "ex":
                opts, w = ["subj", "loc"] + (["time"] if cl.time else []), \
                    [30, 50] + ([30] if cl.time else [])
            cl.front = self.wchoice(opts, w)
        elif not allow_front and cl.front not in ("subj",):
            cl.front = "subj"
            if cl.there:   # indefinite subject needs the locative up front
                cl.subj.det = "def"
                cl.there = False
        return cl


def noun_is(np_: NP, tags: str) -> bool:
    if np_.noun is None:
        return True
    return bool(np_.noun.tags & set(tags.split()))


# ---------------------------------------------------------------- templates
def _coref_pronoun(np_: NP) -> NP | None:
    """Pronoun referring back to ``np_`` (German by gender, English by sex)."""
    if np_.pron_key:
        return _pronoun(np_.pron_key)
    if np_.fixed:
        sex = np_.fixed[3]
        return _pronoun("er" if sex == "m" else "sie")
    if np_.plural:
        return _pronoun("sie_pl")
    n = np_.noun
    de = {"m": "er", "f": "sie", "n": "es"}[n.gender]
    if "person" in n.tags:
        if "male" in n.tags:
            en = "he"
        elif "female" in n.tags:
            en = "she"
        else:
            return None
    elif "animal" in n.tags:
        en = "it"
    else:
        return None
    return NP(fixed=(de, en, "3sg", None))


# consequences of states: (verb key, forced parts)
_STATE = {
    "müde": {
        "pos": [("schlafen", {}), ("schlafen_a", {}), ("laufen", {"comp": "home_d"}),
                ("trinken", {"acc": "Kaffee"}), ("bleiben", {"comp": "home_l"}),
                ("einschlafen", {"loc": "Sofa"})],
        "con": [("arbeiten", {}), ("lesen", {}), ("spielen", {}), ("tanzen", {}),
                ("gehen", {"comp": "Kino"}), ("spazierengehen", {})],
    },
    "hungrig": {
        "pos": [("essen", {}), ("kochen", {"acc": "Suppe"}), ("gehen", {"comp": "Restaurant"}),
                ("fressen", {}), ("kaufen", {"acc": "Brot"}), ("backen", {"acc": "Pizza"})],
        "con": [("essen", {"neg": True}), ("fressen", {"neg": True})],
    },
    "durstig": {"pos": [("trinken", {})], "con": [("trinken", {"neg": True})]},
    "krank": {
        "pos": [("bleiben", {"comp": "home_l"}), ("schlafen", {}), ("gehen", {"comp": "Arzt"})],
        "con": [("arbeiten", {}), ("gehen", {"comp": "Büro"}), ("spielen", {})],
    },
    "glücklich": {"pos": [("singen", {}), ("tanzen", {}), ("lachen", {}), ("lächeln", {})],
                  "con": []},
    "traurig": {"pos": [("weinen", {}), ("bleiben", {"comp": "home_l"})],
                "con": [("lachen", {}), ("singen", {}), ("lächeln", {}), ("tanzen", {})]},
}

# weather: German main / subordinate / past, English simple / progressive / past
_WEATHER = [
    {"de": ("es regnet", "es regnet", "es regnete", "es regnete"),
     "en": ("it rains", "it is raining", "it was raining"),
     "pos": [("bleiben", {"comp": "home_l"}), ("fernsehen", {}),
             ("lesen", {"acc": "Buch", "loc": "home_l"}),
             ("spielen", {"loc": "Haus"})],
     "con": [("spazierengehen", {}), ("spielen", {"loc": "Garten"}), ("gehen", {"comp": "Park"})]},
    {"de": ("die Sonne scheint", "die Sonne scheint", "die Sonne schien", "die Sonne schien"),
     "en": ("the sun shines", "the sun is shining", "the sun was shining"),
     "pos": [("spazierengehen", {}), ("spielen", {"loc": "Garten"}), ("gehen", {"comp": "Strand"}),
             ("schwimmen", {"loc": "See"}), ("sitzen", {"comp": "Garten"})],
     "con": [("bleiben", {"comp": "home_l"}), ("fernsehen", {})]},
    {"de": ("es schneit", "es schneit", "es schneite", "es schneite"),
     "en": ("it snows", "it is snowing", "it was snowing"),
     "pos": [("bleiben", {"comp": "home_l"}), ("bauen", {"acc": "Schneemann"}),
             ("anziehen", {"acc": "Mantel"})],
     "con": [("spazierengehen", {}), ("spielen", {"loc": "Garten"})]},
    {"de": ("es ist kalt", "es kalt ist", "es war kalt", "es kalt war"),
     "en": ("it is cold", "it is cold", "it was cold"),
     "pos": [("anziehen", {"acc": "Jacke"}), ("trinken", {"acc": "Tee"}),
             ("bleiben", {"comp": "home_l"})],
     "con": [("schwimmen", {"loc": "See"}), ("spazierengehen", {})]},
    {"de": ("es ist heiß", "es heiß ist", "es war heiß", "es heiß war"),
     "en": ("it is hot", "it is hot", "it was hot"),
     "pos": [("schwimmen", {"loc": "See"}), ("gehen", {"comp": "Strand"}),
             ("trinken", {"acc": "Wasser"}), ("essen", {"acc": "Eis"})],
     "con": [("arbeiten", {"loc": "Garten"})]},
]

# purpose clauses: place -> (verb key, object tags or None)
_PURPOSE = {
    "Supermarkt": [("kaufen", "food drink")], "Markt": [("kaufen", "fruit veg")],
    "Bäckerei": [("kaufen", "bake")], "Bibliothek": [("lesen", "read"), ("lernen", None)],
    "Restaurant": [("essen_i", None)], "Café": [("trinken", "brew")],
    "Kino": [("sehen", "film")], "Park": [("spielen", None), ("spazierengehen", None)],
    "Strand": [("schwimmen", None)], "See": [("schwimmen", None)],
    "Bahnhof": [("abholen", "kin friend")], "Flughafen": [("abholen", "kin friend")],
    "Krankenhaus": [("besuchen", "kin friend")], "Zoo": [("sehen", "wild")],
    "Museum": [("sehen", "Bild")],
}

_MATRIX = [  # dass-clause verbs: (German 1sg, 3sg, pl, English base)
    ("sage", "sagt", "sagen", "say"), ("glaube", "glaubt", "glauben", "believe"),
    ("weiß", "weiß", "wissen", "know"), ("denke", "denkt", "denken", "think"),
    ("höre", "hört", "hören", "hear"),
]


class _Templates(_Gen):
    def consequence(self, spec, subj: NP, tense: str, ref: NP | None = None,
                    neg: bool = False, concessive: bool = False) -> Clause | None:
        """Clause for a consequence spec with subject ``subj``; ``ref`` is the
        noun phrase the subject stands for (for selectional checks)."""
        key, force_spec = spec
        verb = VERBS[key]
        ref = ref or subj
        if not noun_is(ref, verb.subj):
            return None
        if ref.noun is None and not set(verb.subj.split()) & {"person", "adult", "child"}:
            return None
        if verb.key == "fressen":
            if subj.noun is None or subj.noun.de not in _EATS:
                return None
        force = {}
        neg = neg or force_spec.get("neg", False)
        for k, val in force_spec.items():
            if k == "neg":
                continue
            if val in _HOME:
                force[k] = _HOME[val]
            elif val == "Arzt":
                force[k] = PP("zum Arzt", "to the doctor")
            elif k == "acc":
                noun = NOUNS[val]
                np_ = self.np(noun, "obj", neg=neg, kein_ok=True, adj_p=0.1,
                              dets=None if neg else "zero indef def")
                if not neg and np_.det == "def" and self.p(0.6):
                    np_.det = "zero" if noun.mass else "indef"
                    np_.plural, np_.count = False, None
                if np_.det == "zero" and not noun.mass and not np_.plural:
                    np_.det = "indef"
                force[k] = np_
            elif key == "schwimmen":
                force[k] = _pp("in", "dat", NP(NOUNS[val], "def"), "in")
            else:
                kind = "dir" if verb.frame == "m" else "loc"
                force[k] = _place_pp(NP(NOUNS[val], "def"), kind)
        modal = None
        if tense == "pres" and self.p(0.15):
            if neg:
                modal = self.choice(["will", "kann"])
            elif concessive:
                modal = "muss"
            else:
                modal = self.choice(["will", "möchte"])
        cl = self.clause(verb, subj, tense, modal, neg, time_p=0.2, mid_p=0,
                         allow_front=False, force=force)
        if cl is not None:
            cl.com = None
            if "loc" not in force:
                cl.loc = None
        return cl

    def state_sentence(self):
        state = self.choice(list(_STATE))
        subj = self.subject("person animal", neg=True, pron_p=0.15, name_p=0.15)
        if subj.noun is not None:
            subj.adj = subj.intens = None
            if "animal" in subj.noun.tags and state not in ("müde", "hungrig", "durstig"):
                return None
        pron = _coref_pronoun(subj)
        if pron is None:
            return None
        tense = self.wchoice(["pres", "past"], [65, 35])
        adj = ADJS[state]
        adj_pp = PP(adj.de, adj.en)
        if self.p(0.2):
            adj_pp = PP("sehr " + adj.de, "very " + adj.en)
        form = self.wchoice(["weil", "weil_f", "obwohl", "obwohl_f", "deshalb", "aber"],
                            [30, 18, 14, 10, 14, 14])
        concessive = form.startswith("obwohl") or form == "aber"
        opts = _STATE[state]["con" if concessive else "pos"]
        if not opts:
            return None
        if form in ("weil", "obwohl"):       # consequence first: full NP there
            cons_subj, state_subj = subj, pron
        else:                               # state first: full NP there
            cons_subj, state_subj = pron, subj
        st = Clause(VERBS["sein"], state_subj, tense, comp=adj_pp)
        cons = self.consequence(self.choice(opts), cons_subj, tense, ref=subj,
                                concessive=concessive)
        if cons is None:
            return None
        if form == "weil":
            return (cons.de_main() + ", " + st.de_sub("weil"),
                    cons.en() + " because " + st.en())
        if form == "obwohl":
            return (cons.de_main() + ", " + st.de_sub("obwohl"),
                    cons.en() + ", although " + st.en())
        if form == "weil_f":
            return (cons.de_main(vorfeld=st.de_sub("weil") + ","),
                    "because " + st.en() + ", " + cons.en())
        if form == "obwohl_f":
            return (cons.de_main(vorfeld=st.de_sub("obwohl") + ","),
                    "although " + st.en() + ", " + cons.en())
        if form == "deshalb":
            return (st.de_main() + ", " + cons.de_main(vorfeld="deshalb"),
                    st.en() + ", so " + cons.en())
        return (st.de_main() + ", aber " + cons.de_main(),
                st.en() + ", but " + cons.en())

    def weather_sentence(self):
        w = self.choice(_WEATHER)
        form = self.wchoice(["wenn_f", "wenn", "weil_f", "weil", "obwohl_f", "obwohl",
                             "deshalb", "aber"], [20, 10, 12, 14, 8, 8, 14, 14])
        concessive = form.startswith("obwohl") or form == "aber"
        if form.startswith("wenn"):
            tense = "fut" if form == "wenn_f" and self.p(0.3) else "pres"
        else:
            tense = self.wchoice(["pres", "past"], [60, 40])
        subj = self.subject("person", neg=True)
        if subj.noun is not None:
            subj.adj = subj.intens = None
        spec = self.choice(w["con"] if concessive else w["pos"])
        cons = self.consequence(spec, subj, tense)
        if cons is None:
            return None
        past = tense == "past"
        de_main, de_sub = (w["de"][2], w["de"][3]) if past else (w["de"][0], w["de"][1])
        en_simple, en_prog, en_past = w["en"]
        en_w = en_past if past else (en_simple if form.startswith("wenn") else en_prog)
        if form == "wenn_f":
            head = "if" if tense == "fut" else "when"
            return (cons.de_main(vorfeld="wenn " + de_sub + ","),
                    head + " " + en_w + ", " + cons.en())
        if form == "wenn":
            return cons.de_main() + ", wenn " + de_sub, cons.en() + " when " + en_w
        if form == "weil_f":
            return (cons.de_main(vorfeld="weil " + de_sub + ","),
                    "because " + en_w + ", " + cons.en())
        if form == "weil":
            return cons.de_main() + ", weil " + de_sub, cons.en() + " because " + en_w
        if form == "obwohl_f":
            return (cons.de_main(vorfeld="obwohl " + de_sub + ","),
                    "although " + en_w + ", " + cons.en())
        if form == "obwohl":
            return cons.de_main() + ", obwohl " + de_sub, cons.en() + ", although " + en_w
        if form == "deshalb":
            return (de_main + ", " + cons.de_main(vorfeld="deshalb"),
                    en_w + ", so " + cons.en())
        return de_main + ", aber " + cons.de_main(), en_w + ", but " + cons.en()

    def dass_sentence(self):
        subj = self.subject("person", neg=True, pron_p=0.3)
        if subj.noun is not None:
            subj.adj = subj.intens = None
        verb = self.choice(_MATRIX)
        i = _agr_idx(subj.agr)
        neg = verb[3] in ("believe", "think") and self.p(0.2)
        inner = self.clause(allow_front=False, time_p=0.25, neg=False if neg else None)
        if inner is None or inner.there:
            return None
        en_v = verb[3]
        if neg:
            en = ("does not " if i == 1 else "do not ") + en_v
        else:
            en = _en_third(en_v) if i == 1 else en_v
        de = _join([subj.de("nom"), verb[i], "nicht" if neg else ""])
        return de + ", " + inner.de_sub("dass"), _join([subj.en(), en, "that",
                                                         inner.en(front=False)])

    def relative_sentence(self):
        verb = self.choice(_FRAME_VERBS["t"])
        cl = self.clause(verb, time_p=0.2, mid_p=0, neg=False)
        if cl is None or cl.acc is None or cl.acc.noun is None or cl.acc.noun.mass:
            return None
        if cl.acc.det in ("kein", "zero", "num", "viele", "einige"):
            return None
        cl.loc = cl.com = cl.mid = None
        cl.front = "time" if cl.time else "subj"
        ante = cl.acc
        g = ante.gkey
        kind = self.wchoice(["subj_i", "subj_cop", "obj"], [40, 25, 35])
        tense = cl.tense if cl.tense in ("pres", "past") else "pres"
        who = "who" if "person" in ante.noun.tags else "that"
        if kind == "subj_i":
            verbs = [v for v in _FRAME_VERBS["i"] if noun_is(ante, v.subj) and v.loc]
            if not verbs:
                return None
            rv = self.choice(verbs)
            rel_subj = NP(fixed=(_DEF["nom"][g], who, ante.agr, None))
            rc = self.clause(rv, rel_subj, tense, None, False, time_p=0.15, mid_p=0,
                             allow_front=False)
            if rc is None:
                return None
            if rc.loc is None and rc.comp is None:
                rc.loc = self.spec_pp(self.choice(rv.loc), rel_subj)
                if rc.loc is None:
                    return None
            rel = PP(rc.de_sub(""), rc.en(front=False))
        elif kind == "subj_cop":
            cands = [a for a in _adjs_for(ante.noun) if ante.adj is None
                     or a.de != ante.adj.de]
            if not cands:
                return None
            adj = self.choice(cands)
            word = PP(adj.de, adj.en_for(ante.noun))
            if adj.gradable and self.p(0.3):
                word = PP("sehr " + word.de, "very " + word.en)
            rel_subj = NP(fixed=(_DEF["nom"][g], who, ante.agr, None))
            rc = Clause(VERBS["sein"], rel_subj, tense, comp=word)
            rel = PP(rc.de_sub(""), rc.en(front=False))
        else:
            if "person" in ante.noun.tags:
                return None
            verbs = [v for v in _FRAME_VERBS["t"] if ante.noun.tags & set(v.obj.split())
                     and v.key != "fressen" and v.inf != verb.inf and v.en != verb.en]
            if not verbs:
                return None
            rv = self.choice(verbs)
            rs = self.subject(rv.subj, neg=True, pron_p=0.2)
            if rs.noun is not None:
                rs.adj = rs.intens = None
                if rs.noun.de == ante.noun.de or (cl.subj.noun is not None
                                                  and rs.noun.de == cl.subj.noun.de):
                    return None
            rel_obj = NP(fixed=(_DEF["acc"][g], "that", ante.agr, None))
            rc = Clause(rv, rs, tense, acc=rel_obj)
            # relative pronoun first, then the middle field without the object
            de = _DEF["acc"][g] + " " + _join(rc._midfield({"obj"}) + (
                [rc._nonfinite(), rc._finite()] if rc._nonfinite()
                else [rv.prefix + rc._finite()]))
            en_cl = replace(rc, acc=ante)
            rel = PP(de, _join(["that", rs.en(), _join(en_cl._en_verb(rs.agr))]))
        cl.rel = rel
        return cl.de_main(), cl.en()

    def purpose_sentence(self):
        place = self.choice(list(_PURPOSE))
        key, tags = self.choice(_PURPOSE[place])
        pv = VERBS[key]
        subj = self.subject("adult" if "adult" in pv.subj or "person" in pv.subj
                            else pv.subj, neg=True)
        if not noun_is(subj, pv.subj) or (subj.noun is None and key == "spielen"):
            return None
        go = VERBS["gehen"]
        comp = _place_pp(NP(NOUNS[place], "def"), "dir")
        tense, modal = self.pick_tense(go)
        if modal == "kann":
            modal = "will"
        main = self.clause(go, subj, tense, modal, False, time_p=0.2, mid_p=0,
                           force={"comp": comp})
        if main is None:
            return None
        main.com = None
        force = {}
        if tags in NOUNS:
            force["acc"] = NP(NOUNS[tags], "def", True)
        elif tags:
            noun = self.noun(tags)
            if "kin" in noun.tags or "friend" in noun.tags:
                force["acc"] = NP(noun, self.choice(["mein", "unser"]))
            else:
                force["acc"] = self.np(noun, "obj", dets="zero indef num", adj_p=0.15)
                if force["acc"].det == "zero" and not noun.mass and not force["acc"].plural:
                    force["acc"].det = "indef"
        zu = self.clause(pv, subj, "pres", None, False, time_p=0, mid_p=0,
                         allow_front=False, force=force)
        if zu is None:
            return None
        zu.loc = zu.com = None
        return main.de_main() + ", " + zu.de_zu(), main.en() + " " + zu.en_zu()

    def und_sentence(self):
        def pick():
            verbs = [v for f in ("i", "t", "m", "d") for v in _FRAME_VERBS[f]
                     if "person" in v.subj.split() or "adult" in v.subj.split()]
            return self.choice(verbs)
        a = self.clause(pick(), time_p=0.2, mid_p=0.05)
        if a is None or a.tense not in ("pres", "past"):
            return None
        b = self.clause(pick(), tense=a.tense, modal=None, time_p=0.0, mid_p=0.05)
        if b is None or (b.subj.noun or b.subj.fixed) == (a.subj.noun or a.subj.fixed):
            return None
        return a.de_main() + " und " + b.de_main(), a.en() + " and " + b.en()

    def simple_sentence(self):
        cl = self.clause()
        if cl is None:
            return None
        return cl.de_main(), cl.en()

    def pair(self) -> tuple[str, str]:
        while True:
            kind = self.wchoice(
                ["simple", "state", "weather", "dass", "relative", "purpose", "und"],
                [36, 12, 10, 12, 14, 9, 7])
            out = getattr(self, kind + "_sentence")()
            if out is None:
                continue
            de, en = _sentence(out[0]), _sentence(out[1])
            n = len(de.split())
            if 4 <= n <= 20 and len(en.split()) <= 22:
                return de, en


def generate_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (German, English) sentence pairs, deterministic for ``seed``."""
    gen = _Templates(random.Random(seed))
    return [gen.pair() for _ in range(n)]


def simple_sentence(subject: tuple, verb: str, obj: tuple | None = None,
                    tense: str = "pres", neg: bool = False, modal: str | None = None,
                    comp: tuple | None = None, time: tuple | None = None,
                    front: str = "subj", dat: tuple | None = None) -> tuple[str, str]:
    """Render one clause from explicit parts (used by the tests).

    ``subject``/``obj``/``dat`` are ``noun_phrase`` argument tuples
    ``(noun, det, adj, plural)`` or a pronoun key ("ich", "er", ...);
    ``comp`` is a (German, English) pair, ``time`` likewise.
    """
    def mk(spec):
        if spec is None:
            return None
        if isinstance(spec, str):
            return _pronoun(spec)
        noun, det, adj, plural = (list(spec) + [None, None, False])[:4]
        np_ = NP(NOUNS[noun], det or "def", bool(plural), ADJS[adj] if adj else None)
        numbers = dict(_NUMBERS)
        if det in numbers:
            np_.det, np_.count, np_.plural = "num", (det, numbers[det]), True
        return np_
    cl = Clause(VERBS[verb], mk(subject), tense, modal, neg, dat=mk(dat), acc=mk(obj),
                comp=PP(*comp) if comp else None, time=time, front=front)
    return _sentence(cl.de_main()), _sentence(cl.en())


# ================================================================== files
_TOPICS = [
    ("Hunde & Katzen", "Dogs & cats", "animals, pets"),
    ("Das Leben in der Stadt", "Life in the city", "cities, culture"),
    ("Unsere Familie", "Our family", "family, children"),
    ("Essen & Trinken", "Food & drink", "food, health"),
    ("Ein Tag am Meer", "A day by the sea", "travel, nature"),
    ("Wie wir lernen", "How we learn", "education, children"),
    ("Regen, Sonne & Schnee", "Rain, sun & snow", "weather, nature"),
    ("Reisen mit dem Zug", "Traveling by train", "travel, transportation"),
    ("Kleine Dinge im Alltag", "Small things in everyday life", "design, life"),
    ("Die Kunst des Kochens", "The art of cooking", "food, art"),
    ("Tiere im Wald", "Animals in the forest", "animals, nature"),
    ("Musik für alle", "Music for everyone", "music, entertainment"),
]
_LAST_NAMES = ["Müller", "Schmidt", "Schneider", "Fischer", "Weber", "Wagner", "Becker",
               "Hoffmann", "Schulz", "Keller", "Richter", "Wolf", "Neumann", "Braun"]


def _talk_meta(rng: random.Random, talkid: int) -> dict:
    first = rng.choice(_NAMES)[0]
    speaker = f"{first} {rng.choice(_LAST_NAMES)}"
    de_t, en_t, kw = rng.choice(_TOPICS)
    return {
        "talkid": str(talkid), "speaker": speaker, "keywords": "talks, " + kw,
        "title": {"de": f"{speaker}: {de_t}", "en": f"{speaker}: {en_t}"},
        "description": {"de": f"TED Talk Untertitel und Transkript: {de_t}",
                        "en": f"TED Talk Subtitles and Transcript: {en_t}"},
    }


def _split_talks(rng: random.Random, n: int, lo: int, hi: int) -> list[int]:
    sizes = []
    while n > 0:
        k = min(n, rng.randint(lo, hi))
        sizes.append(k)
        n -= k
    return sizes


def _url(lang: str, talkid: str) -> str:
    return f"http://www.ted.com/talks/lang/{lang}/demo_talk_{talkid}.html"


def _atomic_write(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _train_text(pairs, talks, lang: str) -> str:
    lines, i = [], 0
    idx = 0 if lang == "de" else 1
    for meta, size in talks:
        lines += [
            f"<url>{_url(lang, meta['talkid'])}</url>",
            f"<keywords>{meta['keywords']}</keywords>",
            f"<speaker>{meta['speaker']}</speaker>",
            f"<talkid>{meta['talkid']}</talkid>",
            f"<title>{meta['title'][lang]}</title>",
            f"<description>{meta['description'][lang]}</description>",
        ]
        lines += [p[idx] for p in pairs[i:i + size]]
        i += size
    return "\n".join(lines) + "\n"


def _xml_text(pairs, talks, lang: str, setid: str) -> str:
    idx = 0 if lang == "de" else 1
    if lang == "de":
        head = f'<srcset setid="{setid}" srclang="german">'
        tail = "</srcset>"
    else:
        head = f'<refset setid="{setid}" srclang="german" trglang="english" refid="ref">'
        tail = "</refset>"
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>", head]
    i = 0
    for meta, size in talks:
        lines += [
            f'<doc docid="{meta["talkid"]}" genre="lectures">',
            f"<url>{escape(_url(lang, meta['talkid']))}</url>",
            f"<description>{escape(meta['description'][lang])}</description>",
            f"<keywords>{escape(meta['keywords'])}</keywords>",
            f"<speaker>{escape(meta['speaker'])}</speaker>",
            f"<talkid>{meta['talkid']}</talkid>",
            f"<title>{escape(meta['title'][lang])}</title>",
        ]
        for k, p in enumerate(pairs[i:i + size], 1):
            lines.append(f'<seg id="{k}"> {escape(p[idx])} </seg>')
        lines.append("</doc>")
        i += size
    lines += [tail, "</mteval>"]
    return "\n".join(lines) + "\n"


def _heldout(gen: _Templates, n: int, seen: set) -> list:
    out, tries = [], 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise RuntimeError("could not generate enough unique held-out sentences")
        de, en = gen.pair()
        if de in seen:
            continue
        seen.add(de)
        out.append((de, en))
    return out


def write_demo_corpus(data_dir: str, seed: int = 0, n_train: int = 20000,
                      n_dev: int = 500, n_test: int = 500) -> None:
    """Write the synthetic corpus into ``data_dir`` in the IWSLT16 de-en layout."""
    os.makedirs(data_dir, exist_ok=True)
    train = generate_pairs(n_train, seed)
    meta_rng = random.Random(seed * 7919 + 17)
    held_gen = _Templates(random.Random(seed * 104729 + 1))

    talks, tid = [], 1
    for size in _split_talks(meta_rng, n_train, 100, 300):
        talks.append((_talk_meta(meta_rng, tid), size))
        tid += 1
    files = {
        "train.tags.de-en.de": _train_text(train, talks, "de"),
        "train.tags.de-en.en": _train_text(train, talks, "en"),
    }
    seen = {de for de, _ in train}
    for setid, n, first_id in (("IWSLT16.TED.tst2013", n_dev, 5001),
                               ("IWSLT16.TED.tst2014", n_test, 6001)):
        pairs = _heldout(held_gen, n, seen)
        docs, tid = [], first_id
        for size in _split_talks(meta_rng, n, 60, 140):
            docs.append((_talk_meta(meta_rng, tid), size))
            tid += 1
        for lang in ("de", "en"):
            files[f"{setid}.de-en.{lang}.xml"] = _xml_text(pairs, docs, lang, setid)
    for name, text in files.items():
        _atomic_write(os.path.join(data_dir, name), text)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data_dir", default="data/demo", help="output directory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n_train", type=int, default=20000)
    ap.add_argument("--n_dev", type=int, default=500)
    ap.add_argument("--n_test", type=int, default=500)
    args = ap.parse_args(argv)
    write_demo_corpus(args.data_dir, args.seed, args.n_train, args.n_dev, args.n_test)
    print(f"wrote demo corpus to {args.data_dir}")


if __name__ == "__main__":
    main()
