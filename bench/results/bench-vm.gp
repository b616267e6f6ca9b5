set terminal pngcairo size 1500,480 font 'sans,10'
set output 'bench/results/bench-vm.png'
set multiplot layout 1,3 title 'gpumem host benchmarks on vm (2 CPUs), make bench' font 'sans,12'
set logscale x 2
set xlabel 'threads'
set grid
set key top right
set logscale y
set title 'Queue pair: submit + complete, instant controller'
set ylabel 'operations / s'
plot 'bench/results/bench-vm.dat' index 0 with linespoints title 'lock-free pair', 'bench/results/bench-vm.dat' index 1 with linespoints title 'mutex-guarded queue (baseline)'
unset logscale y
set title 'Cache hits: fetch-add / CAS reference count'
set ylabel 'ratio'
plot 'bench/results/bench-vm.dat' index 2 with linespoints title '512 B lines', 'bench/results/bench-vm.dat' index 3 with linespoints title '4096 B lines', 'bench/results/bench-vm.dat' index 4 with linespoints title '65536 B lines', 1 with lines dashtype 2 lc rgb 'gray' title 'equal'
unset logscale y
set title 'Cache misses: through the cache / direct reads'
set ylabel 'ratio'
plot 'bench/results/bench-vm.dat' index 5 with linespoints title '512 B lines', 'bench/results/bench-vm.dat' index 6 with linespoints title '4096 B lines', 'bench/results/bench-vm.dat' index 7 with linespoints title '65536 B lines', 1 with lines dashtype 2 lc rgb 'gray' title 'equal'
unset multiplot
